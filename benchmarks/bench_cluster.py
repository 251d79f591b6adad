"""Cluster benchmark: in-process Lucene against an OpenSearch cluster of 1 and 2 shards, in one run.

    python benchmarks/bench_cluster.py [--corpus scifact scale1m] [--checkpoint general] [--json-out F] [--record]

It starts its own two-node cluster (``bm25aug cluster``; ``--url`` takes yours instead), indexes each
corpus into it twice (1 shard and 2 shards, one replica each; on ``--url``, reused when already
complete) and measures,
on SciFact's 300 test queries, k=1000:

* QPS of bm25-flat (query texts) and augmented (term lists the model wrote beforehand, so the
  encoder is not timed), on 1 and 2 threads, for in-process Lucene, 1 shard, 2 shards, and 2
  shards with shard-local statistics (``?stats=local``, no DFS round trip);
* where a cluster query's time goes, one query at a time on 2 shards, through public calls only
  (``search_request``, ``Client.request``): JSON (opensearch-py's serializer encoding the request
  and decoding the answer), the cluster's own time (``took``: DFS, query and fetch phases with their
  scatter and gather between the nodes), and HTTP (the rest of the round trip).

``scale1m`` is ``benchmarks/scale.py``'s SciFact padded to 1M passages (written once). The machine
is one 2-core box: both nodes, the client and in-process Lucene share it, so the ratios, not the
absolute numbers, are the result. ``--record`` writes ``docs/data/bench_cluster.json``, which
``docs/speed.md``'s Cluster table is generated from.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from timing import qps  # noqa: E402

from bm25aug.data.registry import load_dataset  # noqa: E402
from bm25aug.lucene.index import ensure_index  # noqa: E402

RECORD = Path("docs/data/bench_cluster.json")
CORPORA = {"scifact": None, "scale1m": 1_000_000}


def corpus(name: str):
    if CORPORA[name] is None:
        return load_dataset(name)
    from scale import padded_corpus

    return load_dataset(str(padded_corpus(CORPORA[name])))


def cluster_index(dataset, base: str, shards: int) -> str:
    """The dataset's index of ``shards`` shards on the cluster, ingested unless already complete."""
    from bm25aug.errors import UserError
    from bm25aug.opensearch.ingest import ingest
    from bm25aug.search.bm25 import BM25Searcher

    url = f"{base}/bench-{dataset.name.lower().replace('_', '-')}-s{shards}"
    try:
        BM25Searcher(url).index.verify(dataset)
    except UserError:
        start = time.perf_counter()
        ingest(dataset, url, shards=shards, replicas=1, force=True)
        print(f"ingested {dataset.name} into {shards} shard(s) in {time.perf_counter() - start:.0f} s", flush=True)
    return url


def breakdown(searcher, term_lists: list[dict], k: int) -> dict:
    """Milliseconds a query, median over the queries, of the product's own request
    (``OpenSearchIndex.search_request``, sent by ``Client.request`` through opensearch-py): the whole
    round trip; JSON (its serializer encoding the request and decoding an answer of that size,
    timed aside); the cluster's own time (``took``); HTTP (the rest)."""
    index = searcher.index
    serializer = index.client.opensearch.transport.serializer
    parts = {"json": [], "cluster": [], "http": [], "total": []}
    for terms in term_lists:
        pairs = index.terms_element(terms)
        if pairs is None:
            continue
        request = index.search_request(pairs, k)
        start = time.perf_counter()
        answer = index.client.request(request.method, request.path, request.body, params=request.params)
        answered = time.perf_counter()
        text = serializer.dumps(answer)
        coded = time.perf_counter()
        serializer.dumps(request.body)
        serializer.loads(text)
        done = time.perf_counter()
        total, json_ms = (answered - start) * 1000, (done - coded) * 1000
        parts["json"].append(json_ms)
        parts["cluster"].append(float(answer["took"]))
        parts["http"].append(max(total - json_ms - answer["took"], 0.0))
        parts["total"].append(total)
    return {key: float(np.median(values)) for key, values in parts.items()}


def measure(name: str, base: str, checkpoint: str, k: int) -> dict:
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    dataset = corpus(name)
    queries = list(load_dataset("scifact").split("test").queries.values())
    folder = ensure_index(dataset, "flat")
    targets = {"in-process": str(folder), "1 shard": cluster_index(dataset, base, 1),
               "2 shards": cluster_index(dataset, base, 2)}
    targets["2 shards, local stats"] = targets["2 shards"] + "?stats=local"
    lists = AugmentedSearcher.from_pretrained(checkpoint, folder).term_lists(queries)
    rows = {}
    for label, where in targets.items():
        searcher = BM25Searcher(where)
        row = {}
        for t in (1, 2):
            row[f"bm25_flat_qps_{t}t"] = qps(lambda q, n: searcher.batch_search_arrays(q, k, threads=n), queries, t)
            row[f"augmented_qps_{t}t"] = qps(lambda q, n: searcher.batch_search_terms_arrays(q, k, threads=n), lists, t)
        if label != "in-process":
            row["breakdown_ms"] = breakdown(searcher, lists, k)
        rows[label] = row
        print(f"{name} {label}: {row}", flush=True)
    return {"corpus": name, "num_docs": BM25Searcher(str(folder)).num_docs, "queries": len(queries), "k": k,
            "checkpoint": checkpoint, "rows": rows, "command": "python " + " ".join(sys.argv)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    p.add_argument("--checkpoint", default="general", help="the model that writes the term lists (default: general)")
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--url", help="a cluster of yours (http://HOST:PORT[,...]) instead of a local one started here")
    p.add_argument("--json-out")
    p.add_argument("--record", action="store_true", help=f"write {RECORD}")
    args = p.parse_args()
    from bm25aug.opensearch import local

    root = None
    if args.url:
        base = args.url.rstrip("/")
    else:
        root = Path("runs/bench-cluster")
        base = local.start(2, root)["url"]
    try:
        results = [measure(name, base, args.checkpoint, args.k) for name in args.corpus]
    finally:
        if root is not None:
            local.delete(root)
    from bm25aug.reproduce.tables import cluster_table

    print(cluster_table(results))
    for path in filter(None, (args.json_out, RECORD if args.record else None)):
        Path(path).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
