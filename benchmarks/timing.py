"""Throughput as every benchmark here measures it, ours and bm25s's alike. It imports nothing
heavy (no torch, no JVM): ``bm25s_peer.py`` uses it in a process whose peak RSS must stay bm25s's own."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

WARMUP_S = 5.0  # the JVM's C2 compiler takes thousands of queries to settle on Lucene's code
REPEATS = 3


def qps(batch_search: Callable[[list[str], int], object], queries: list[str], threads: int) -> float:
    """Queries per second of one batch over all queries, the median of ``REPEATS`` batches after
    ``WARMUP_S`` seconds of the same batches (steady state: a long evaluation or a server)."""
    start = time.perf_counter()
    while time.perf_counter() - start < WARMUP_S:
        batch_search(queries, threads)
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        batch_search(queries, threads)
        times.append(time.perf_counter() - start)
    return len(queries) / float(np.median(times))
