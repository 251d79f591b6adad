"""flat vs wp on one dataset, in one run: index build time, per-query latency (p50, p95) and
single-thread QPS, printed with the wp/flat ratios.  ``python benchmarks/bench_bm25.py --dataset scifact``"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.lucene.index import build_index
from bm25aug.search.bm25 import BM25Searcher


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--split", default="test")
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2, help="indexing threads")
    p.add_argument("--repeats", type=int, default=2, help="index builds per flavor (best is kept)")
    args = p.parse_args()
    ds = load_dataset(args.dataset)
    queries = list(ds.split(args.split).queries.values())
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        build_index(ds, "flat", f"{tmp}/warmup", threads=args.threads)  # JVM and class loading
        for flavor in ("flat", "wp"):
            builds = []
            for r in range(args.repeats):
                start = time.perf_counter()
                path = build_index(ds, flavor, f"{tmp}/{flavor}{r}", threads=args.threads)
                builds.append(time.perf_counter() - start)
            searcher = BM25Searcher(path)
            for q in queries[:20]:
                searcher.search(q, args.k)
            lat = []
            for q in queries:
                start = time.perf_counter()
                searcher.search(q, args.k)
                lat.append(time.perf_counter() - start)
            lat_ms = np.asarray(lat) * 1000
            results[flavor] = {"build_s": min(builds), "p50_ms": float(np.percentile(lat_ms, 50)),
                               "p95_ms": float(np.percentile(lat_ms, 95)), "qps": len(lat) / float(np.sum(lat))}
    print(f"\n{args.dataset}: {len(ds.corpus)} docs, {len(queries)} {args.split} queries, k={args.k}, "
          f"{args.threads} indexing threads, searches single-threaded")
    print("| metric | flat | wp | wp / flat |\n|---|---|---|---|")
    for key, label in (("build_s", "index build (s)"), ("p50_ms", "latency p50 (ms)"), ("p95_ms", "latency p95 (ms)"),
                       ("qps", "QPS, 1 thread")):
        f, w = results["flat"][key], results["wp"][key]
        print(f"| {label} | {f:.2f} | {w:.2f} | {w / f:.2f}x |")


if __name__ == "__main__":
    main()
