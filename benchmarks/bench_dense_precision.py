"""bge-small-en-v1.5's two pinned exports, fp32 and int8, and the default that splits them (the
corpus by int8, queries by fp32: ``bge-small-en-v1.5-int8-corpus``), side by side in one run: test nDCG@10
of the dense peer alone, the corpus encoding's documents per second, one query's encoding time
(p50, p95), how long the queries are in tokens (instruction included), and what capping a query's
tokens (``--query-caps``) would cost in nDCG@10, per dataset.

    python benchmarks/bench_dense_precision.py [--datasets scifact nfcorpus] [--query-caps 32 512] [--json-out docs/data/dense_precision.json]

nDCG@10 is the product's: a query read whole, to the model's own limit (512 tokens, its
instruction included). Each cap is measured here only (the query side's tokenizer truncated at it,
the corpus's vectors as cached); a cap of 512 is the query uncut.

Each corpus is encoded through the embeddings cache (``bm25aug.dense.embeddings``), so a corpus
encoded before is not encoded again: its documents per second are then the ones its cache
recorded (``"cached": true``), measured when it was made. Record with nothing else running, and
compare within one run (the load average is recorded before and after).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.eval.metrics import evaluate_split
from bm25aug.io import write_json
from bm25aug.lucene.index import ensure_index
from bm25aug.dense.models import SplitPrecision
from bm25aug.search.dense import DenseSearcher

MODELS = ("bge-small-en-v1.5-fp32", "bge-small-en-v1.5-int8", "bge-small-en-v1.5-int8-corpus")
LATENCY_QUERIES = 200  # queries timed one by one, each encoded alone


def one_dataset(name: str, models: tuple[str, ...], caps: tuple[int, ...] = ()) -> dict:
    dataset = load_dataset(name)
    split_name = dataset.spec.eval_split
    split = dataset.split(split_name)
    qids, queries = list(split.queries), list(split.queries.values())
    index = ensure_index(dataset, "flat")
    row = {"split": split_name, "queries": len(queries), "documents": None, "models": {}}
    for model in models:
        start = time.perf_counter()
        searcher = DenseSearcher(index, model)
        setup_s = time.perf_counter() - start
        docs = len(searcher.embeddings)
        row["documents"] = docs
        cached = setup_s < 0.5 * searcher.encode_seconds  # the embeddings came from the cache
        metrics = evaluate_split(searcher.batch_search(queries, qids, k=1000), split, dataset.corpus)
        capped, side = {}, query_side(searcher.model)
        for cap in caps:  # the queries' tokens cut at `cap`, instruction included; documents as cached
            side.query_tokenizer.enable_truncation(cap)
            capped[str(cap)] = evaluate_split(searcher.batch_search(queries, qids, k=1000), split,
                                              dataset.corpus)["ndcg@10"]
        side.query_tokenizer.enable_truncation(side.query_tokens)
        times = []
        for query in queries[:LATENCY_QUERIES]:
            start = time.perf_counter()
            searcher.model.encode_queries([query])
            times.append((time.perf_counter() - start) * 1000)
        lengths = [len(side.tokenizer.encode(side.kind.query_prefix + q).ids) for q in queries]  # uncut
        row["models"][model] = {
            "ndcg@10": metrics["ndcg@10"], "recall@100": metrics.get("recall@100"), "ndcg@10_query_cap": capped,
            "encode_s": searcher.encode_seconds, "docs_per_s": docs / searcher.encode_seconds, "cached": cached,
            "query_ms": {"p50": float(np.percentile(times, 50)), "p95": float(np.percentile(times, 95))},
            "query_tokens": {"p50": float(np.percentile(lengths, 50)), "p99": float(np.percentile(lengths, 99)),
                             "max": int(max(lengths))}}
        m = row["models"][model]
        print(f"{name} {model}: nDCG@10 {m['ndcg@10']:.4f}  {m['docs_per_s']:.1f} docs/s"
              f"{' (cached)' if cached else ''}  query p50 {m['query_ms']['p50']:.2f} ms", flush=True)
    return row


def query_side(model):
    """The export that encodes a model's queries (a split model's query export)."""
    return model.queries if isinstance(model, SplitPrecision) else model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="+", default=["scifact", "nfcorpus"])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--query-caps", nargs="*", type=int, default=[32, 512])
    p.add_argument("--json-out", default="docs/data/dense_precision.json")
    args = p.parse_args()
    out = {"command": " ".join(["python benchmarks/bench_dense_precision.py", *sys.argv[1:]]),
           "load_before": os.getloadavg(), "cores": os.cpu_count(), "latency_queries": LATENCY_QUERIES,
           "datasets": {}}
    for name in args.datasets:
        out["datasets"][name] = one_dataset(name, tuple(args.models), tuple(args.query_caps))
    out["load_after"] = os.getloadavg()
    write_json(Path(args.json_out), out)


if __name__ == "__main__":
    main()
