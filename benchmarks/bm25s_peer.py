"""bm25s, the speed peer of ``bench_search.py``, alone in its process: its peak RSS is its own.

    python benchmarks/bm25s_peer.py DATASET [--split S] [--k 1000]

Builds bm25s's index (k1 0.9, b 0.4, its own tokenizer) over the corpus texts, then times one
query at a time (p50, p95) and one ``retrieve`` over all queries on 1 and 2 threads (tokenizing
included; ``timing.qps``, as ours). Prints one JSON line: build_s, peak_rss_mb, p50_ms, p95_ms, qps_1t, qps_2t.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import bm25s
import numpy as np

from bm25aug.data.registry import load_dataset
from timing import qps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset")
    p.add_argument("--split")
    p.add_argument("--k", type=int, default=1000)
    args = p.parse_args()
    dataset = load_dataset(args.dataset)
    queries = list(dataset.split(args.split or dataset.spec.eval_split).queries.values())
    start = time.perf_counter()
    retriever = bm25s.BM25(k1=0.9, b=0.4)
    retriever.index(bm25s.tokenize([doc.contents for _, doc in dataset.corpus.items()], show_progress=False),
                    show_progress=False)
    build_s = time.perf_counter() - start
    k = min(args.k, len(dataset.corpus))

    def batch(qs: list[str], threads: int):
        return retriever.retrieve(bm25s.tokenize(qs, show_progress=False), k=k, show_progress=False, n_threads=threads)

    for q in queries[:10]:
        batch([q], 1)
    latencies = []
    for q in queries:
        start = time.perf_counter()
        batch([q], 1)
        latencies.append((time.perf_counter() - start) * 1000)
    rates = {}
    for threads in (1, 2):
        rates[f"qps_{threads}t"] = qps(batch, queries, threads)
    print(json.dumps({"name": "bm25s", "build_s": build_s, "p50_ms": float(np.percentile(latencies, 50)),
                      "p95_ms": float(np.percentile(latencies, 95)), **rates,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
