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


def paired_qps(paths: dict[str, Callable[[list[str], int], object]], queries: list[str], threads: int,
               rounds: int = 9, warmup_s: float = 2.0) -> dict[str, dict[str, float]]:
    """Per path, its QPS and its ratio to the first path's, each the median over ``rounds`` rounds
    in which every path searches the whole batch once, in turn: a slow spell of the machine hits
    the paths of one round alike, so the ratios hold where two separate ``qps`` calls wander
    (on two cores, bm25-flat alone measured 1,142 then 2,030 QPS in consecutive calls)."""
    for search in paths.values():
        start = time.perf_counter()
        while time.perf_counter() - start < warmup_s:
            search(queries, threads)
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, search in paths.items():
            start = time.perf_counter()
            search(queries, threads)
            times[name].append(time.perf_counter() - start)
    first = np.asarray(times[next(iter(paths))])
    return {name: {"qps": len(queries) / float(np.median(t)), "over_first": float(np.median(first / np.asarray(t)))}
            for name, t in times.items()}
