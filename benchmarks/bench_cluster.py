"""Cluster benchmark: in-process Lucene against an OpenSearch cluster, and against a native
``match`` query sent through opensearch-py, in one run.

    python benchmarks/bench_cluster.py [--corpus scifact scale1m] [--shards 1 2] [--checkpoint general]
                                       [--json-out F] [--record]

It starts its own cluster (``bm25aug cluster``'s default: three nodes; ``--url`` takes yours
instead), indexes each corpus into it (one index per ``--shards`` count, one replica each, timed:
ingest seconds, documents a second, the index's size on disk with and without its replicas) and
measures, on SciFact's 300 test queries, k=1000:

* QPS of bm25-flat (query texts) and augmented (term lists the model wrote beforehand, so the
  encoder is not timed), on 1 and 2 threads, for in-process Lucene, each shard count, and the most
  shards with shard-local statistics (``?stats=local``, no DFS round trip);
* QPS of the native query a user of the cluster sends without bm25aug: ``match`` on the
  ``contents`` field, ``dfs_query_then_fetch``, through ``opensearchpy.OpenSearch.search``, with
  how many of its top 10 equal bm25aug's (bm25-flat);
* where a cluster query's time goes, one query at a time on the most shards, through public calls
  only (``search_request``, ``Client.request``): JSON (opensearch-py's serializer encoding the
  request and decoding the answer), the cluster's own time (``took``: DFS, query and fetch phases
  with their scatter and gather between the nodes), and HTTP (the rest of the round trip).

``scale1m`` is ``benchmarks/scale.py``'s SciFact padded to 1M passages (written once). The machine
is one 2-core box: every node, the client and in-process Lucene share it, so the ratios, not the
absolute numbers, are the result. ``--record`` puts each corpus's result into
``docs/data/bench_cluster.json`` (a corpus measured again replaces its entry), which
``docs/scale-out.md``'s tables are generated from.
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


def cluster_index(dataset, base: str, shards: int) -> tuple[str, dict]:
    """The dataset's index of ``shards`` shards on the cluster, ingested unless already complete;
    its URL, its size (merged to one segment a shard, as the ingest ends) and, when ingested now, how
    long that took."""
    from bm25aug.errors import UserError
    from bm25aug.opensearch.client import Client, ClusterURL
    from bm25aug.opensearch.ingest import ingest
    from bm25aug.search.bm25 import BM25Searcher

    url = f"{base}/bench-{dataset.name.lower().replace('_', '-')}-s{shards}"
    made: dict = {"shards": shards, "replicas": 1}
    try:
        BM25Searcher(url).index.verify(dataset)
    except UserError:
        start = time.perf_counter()
        ingest(dataset, url, shards=shards, replicas=1, force=True)
        seconds = time.perf_counter() - start
        made.update(ingest_s=seconds, docs_per_s=len(dataset.corpus) / seconds)
        print(f"ingested {dataset.name} into {shards} shard(s) in {seconds:.0f} s", flush=True)
    client = Client(ClusterURL.parse(url))
    index = ClusterURL.parse(url).index
    store = client.request("GET", f"/{index}/_stats/store")["_all"]
    made.update(primary_bytes=store["primaries"]["store"]["size_in_bytes"],
                total_bytes=store["total"]["store"]["size_in_bytes"])
    return url, made


def native_match(url: str, k: int):
    """A batch search of query texts as a user of the cluster sends it without bm25aug: a
    ``match`` query through the URL's opensearch-py client, exact statistics; each query's
    (ids, scores)."""
    from concurrent.futures import ThreadPoolExecutor

    from bm25aug.bm25_defaults import FIELD
    from bm25aug.opensearch.client import Client, ClusterURL

    target = ClusterURL.parse(url)
    opensearch = Client(target).opensearch

    def one(text: str) -> tuple[list[str], list[float]]:
        answer = opensearch.search(index=target.index, body={"query": {"match": {FIELD: text}}, "size": k,
                                                             "_source": False, "track_total_hits": False},
                                   params={"search_type": "dfs_query_then_fetch",
                                           "allow_partial_search_results": "false"})
        hits = answer["hits"]["hits"]
        return [hit["_id"] for hit in hits], [hit["_score"] for hit in hits]

    def batch(queries: list[str], threads: int) -> list[tuple[list[str], list[float]]]:
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, queries))

    return batch


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


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


def measure(name: str, base: str, checkpoint: str, k: int, shard_counts: list[int]) -> dict:
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    dataset = corpus(name)
    queries = list(load_dataset("scifact").split("test").queries.values())
    folder = ensure_index(dataset, "flat")
    targets, made = {"in-process": str(folder)}, {"in-process": {"total_bytes": folder_bytes(folder)}}
    for shards in shard_counts:
        label = f"{shards} shard{'s' if shards > 1 else ''}"
        targets[label], made[label] = cluster_index(dataset, base, shards)
    most = targets[f"{max(shard_counts)} shard{'s' if max(shard_counts) > 1 else ''}"]
    targets[f"{max(shard_counts)} shards, local stats" if max(shard_counts) > 1 else "1 shard, local stats"] = \
        most + "?stats=local"
    lists = AugmentedSearcher.from_pretrained(checkpoint, folder).term_lists(queries)
    rows = {}
    for label, where in targets.items():
        searcher = BM25Searcher(where)
        row = dict(made.get(label, {}))
        for t in (1, 2):
            row[f"bm25_flat_qps_{t}t"] = qps(lambda q, n: searcher.batch_search_arrays(q, k, threads=n), queries, t)
            row[f"augmented_qps_{t}t"] = qps(lambda q, n: searcher.batch_search_terms_arrays(q, k, threads=n), lists, t)
        if label != "in-process":
            row["breakdown_ms"] = breakdown(searcher, lists, k)
        rows[label] = row
        print(f"{name} {label}: {row}", flush=True)
    rows["native match (opensearch-py)"] = native_row(most, queries, k)
    print(f"{name} native match: {rows['native match (opensearch-py)']}", flush=True)
    words = float(np.mean([len(f"{doc.title} {doc.text}".split()) for doc in dataset.corpus.values()]))
    return {"corpus": name, "num_docs": BM25Searcher(str(folder)).num_docs, "words_per_doc": words,
            "queries": len(queries), "k": k, "checkpoint": checkpoint, "cluster": cluster_facts(base), "rows": rows,
            "command": "python " + " ".join(sys.argv)}


def native_row(url: str, queries: list[str], k: int) -> dict:
    """QPS of the native ``match`` query; for how many queries its top 10 are bm25aug's (bm25-flat)
    id for id, and score for score at each rank (Anserini's 4 decimals and tie rule on both sides),
    where they can differ only in which of the documents tied on a score come first."""
    from bm25aug.search.bm25 import BM25Searcher

    from bm25aug.ranking import anserini_scores

    batch = native_match(url, k)
    searcher = BM25Searcher(url)
    ours = [(searcher.docids[t.lucene_ids[:10]].tolist(), t.scores[:10].tolist())
            for t in searcher.batch_search_arrays(queries, 10)]
    # (the engine's own scores, rounded and their ties lowered as Anserini's, and bm25aug's, do: 3.x scores
    # are Lucene's, so equal bit for bit)
    theirs = [(ids[:10], anserini_scores(np.asarray(scores[:10], np.float32)).tolist())
              for ids, scores in native_match(url, 10)(queries, 2)]
    row = {f"bm25_flat_qps_{t}t": qps(batch, queries, t) for t in (1, 2)}
    row["same_top10"] = sum(a[0] == b[0] for a, b in zip(ours, theirs))
    row["same_scores_top10"] = sum(a[1] == b[1] for a, b in zip(ours, theirs))
    return row


def cluster_facts(base: str) -> dict:
    """The engine, its version and node count (what the rows ran on)."""
    from bm25aug.opensearch.client import Client, ClusterURL

    client = Client(ClusterURL.parse(base, need_index=False))
    about = client.request("GET", "/")
    nodes = client.request("GET", "/_cluster/health")["number_of_nodes"]
    return {"engine": f"{about['version'].get('distribution', 'opensearch')} {about['version']['number']}",
            "nodes": nodes}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    p.add_argument("--shards", nargs="+", type=int, default=[1, 2], help="an index of each shard count (default: 1 2)")
    p.add_argument("--checkpoint", default="general", help="the model that writes the term lists (default: general)")
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--url", help="a cluster of yours (http://HOST:PORT[,...]) instead of a local one started here; "
                                 "its indexes bench-CORPUS-sN are reused when complete, else made again (--force)")
    p.add_argument("--json-out")
    p.add_argument("--record", action="store_true", help=f"put each corpus's result into {RECORD}")
    args = p.parse_args()
    from bm25aug.opensearch import local

    root = None
    if args.url:
        base = args.url.rstrip("/")
    else:
        root = Path("runs/bench-cluster")
        base = local.start(root=root)["url"]
    try:
        results = [measure(name, base, args.checkpoint, args.k, sorted(set(args.shards))) for name in args.corpus]
    finally:
        if root is not None:
            local.delete(root)
    from bm25aug.reproduce.tables import cluster_table

    print(cluster_table(results))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    if args.record:
        kept = [r for r in json.loads(RECORD.read_text(encoding="utf-8")) if r["corpus"] not in args.corpus] \
            if RECORD.exists() else []
        RECORD.write_text(json.dumps(kept + results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
