"""What hybrid search costs beside bm25-flat, in one run: single-query latency (p50, p95) and batch
QPS of bm25-flat, the packaged ``general``, the dense peer alone, and both hybrids (each fused with
the default dense model, ``DEFAULT_DENSE_MODEL``, by the default fusion), on one dataset's
queries, with ratios to bm25-flat; and the dense peer and the general hybrid with each model of
``--also`` (default: ``bge-small-en-v1.5-int8``, int8 queries too: the fastest export).

    python benchmarks/bench_hybrid.py [--dataset scifact] [--k 10] [--threads 1 2] [--also bge-small-en-v1.5-int8] [--json-out docs/data/hybrid_cost.json]

Latencies are measured query by query in turn over the paths (``bench_search.interleaved_latencies``)
and QPS in paired rounds (``timing.paired_qps``), so a slow spell of the machine hits every path
alike. The dense side's one-off cost, the corpus encoding (cached), and its embeddings' memory are
recorded beside them. A hybrid fetches each side's top ``depth`` (1000 by default) whatever k is:
that, and the query's dense encoding, are its cost.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_search import interleaved_latencies  # noqa: E402
from timing import paired_qps  # noqa: E402

from bm25aug.data.registry import load_dataset  # noqa: E402
from bm25aug.io import write_json  # noqa: E402
from bm25aug.lucene.index import ensure_index  # noqa: E402
from bm25aug.search.augmented import AugmentedSearcher  # noqa: E402
from bm25aug.search.bm25 import BM25Searcher  # noqa: E402
from bm25aug.search.dense import DenseSearcher  # noqa: E402
from bm25aug.search.hybrid import DEFAULT_FUSION, HybridSearcher  # noqa: E402


def searchers(dataset, also: list[str]) -> dict:
    index = ensure_index(dataset, "flat")
    bm25 = BM25Searcher(index, flavor="flat")
    general = AugmentedSearcher.from_pretrained("general", index)
    dense = DenseSearcher(bm25.index)
    paths = {"bm25-flat": bm25, "general": general, "dense": dense,
             "hybrid (bm25-flat)": HybridSearcher(bm25, dense), "hybrid (general)": HybridSearcher(general, dense)}
    for name in also:
        other = DenseSearcher(bm25.index, name)
        paths |= {f"dense ({name})": other, f"hybrid (general, {name})": HybridSearcher(general, other)}
    return paths


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--split")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--also", nargs="*", default=["bge-small-en-v1.5-int8"], help="other dense models to time")
    p.add_argument("--json-out", default="docs/data/hybrid_cost.json")
    args = p.parse_args()
    dataset = load_dataset(args.dataset)
    split_name = args.split or dataset.spec.eval_split
    split = dataset.split(split_name)
    queries = list(split.queries.values())
    paths = searchers(dataset, args.also)
    latencies = interleaved_latencies({name: (lambda q, s=s: s.search_arrays(q, args.k), queries[:200])
                                       for name, s in paths.items()})
    base = np.percentile(latencies["bm25-flat"], 50)
    out = {"command": "python benchmarks/bench_hybrid.py " + " ".join(sys.argv[1:]), "dataset": args.dataset,
           "split": split_name, "queries": len(queries), "k": args.k,
           "fusion": DEFAULT_FUSION.describe(), "dense_model": paths["dense"].model.name,
           "load_before": os.getloadavg(), "corpus_encode_s": paths["dense"].encode_seconds,
           "embeddings_mb": paths["dense"].embeddings.nbytes / 2**20, "latency_ms": {}, "qps": {}}
    for name, ms in latencies.items():
        p50 = float(np.percentile(ms, 50))
        out["latency_ms"][name] = {"p50": p50, "p95": float(np.percentile(ms, 95)), "p50_over_bm25": p50 / base}
        print(f"{name:20s} p50 {p50:7.2f} ms  p95 {out['latency_ms'][name]['p95']:7.2f} ms  x{p50 / base:5.2f} bm25-flat's")
    for threads in args.threads:
        rates = paired_qps({name: (lambda qs, t, s=s: s.batch_search_arrays(qs, args.k, t)) for name, s in paths.items()},
                           queries, threads, rounds=3)
        out["qps"][str(threads)] = rates
        for name, r in rates.items():
            print(f"{threads} thread(s) {name:20s} {r['qps']:8.1f} QPS  x{r['over_first']:5.2f} bm25-flat's")
    out["load_after"] = os.getloadavg()
    write_json(Path(args.json_out), out)


if __name__ == "__main__":
    main()
