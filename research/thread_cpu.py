"""Where a batch search's CPU goes, thread by thread: Lucene's pool, Python, the JIT, the GC.

    python research/thread_cpu.py [--dataset scifact] [--warmup 30] [--rounds 5]

bm25-flat ``batch_search_arrays`` over the split's queries (k=1000) on 1 and 2 threads, after
``--warmup`` batches (the JVM's C2 compiler keeps compiling Lucene's code for thousands of
queries). Prints wall ms per query and each thread group's CPU ms per query, read from
``/proc/self/task`` (Linux only), and how often Python woke up to see whether a batch was done:
what keeps two threads from halving the wall time; first, how many queries tie past
``bm25aug.ranking.TIE_MARGIN`` hits beyond the k-th (those are searched again); last, Python's own steps
per query on one chunk's hits (``python_steps``), and how much CPU a query would have to shed for
two threads to reach 1.7x one.
"""

from __future__ import annotations

import argparse
import os
import re
import time

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.lucene.index import ensure_index
from bm25aug.search.bm25 import BM25Searcher

_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def thread_ticks() -> dict[str, int]:
    """CPU ticks (user + system) so far per thread group (the thread name less its number)."""
    out: dict[str, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = open(f"/proc/self/task/{tid}/comm").read().strip()
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        group = re.sub(r"[-#]?\d+[-\d]*$", "", name)
        out[group] = out.get(group, 0) + int(fields[11]) + int(fields[12])
    return out


def tie_runs(flat: BM25Searcher, queries: list[str], k: int = 1000) -> np.ndarray:
    """Per query, how many hits past the k-th tie with it: with a margin of m hits, a query whose
    run is m or longer is searched again (its last fetched hit still ties, ``LuceneIndex.complete``)."""
    index, out = flat.index, []
    for query in queries:
        _, scores = index.raw_top(index.analyzed_query(query), index.num_docs)
        out.append(0 if len(scores) <= k else int(np.flatnonzero(scores == scores[k - 1])[-1]) - (k - 1))
    return np.asarray(out)


class WakeUps:
    """Counts the sleeps of Python's wait for a batch (``JavaBatch.result`` polls, then sleeps) and
    the CPU they cost this thread: each wake-up takes CPU that two Java threads need."""

    def __enter__(self) -> "WakeUps":
        self.count, self.cpu_s, self._sleep = 0, 0.0, time.sleep

        def sleep(seconds: float) -> None:
            start = time.thread_time()
            self._sleep(seconds)
            self.cpu_s += time.thread_time() - start
            self.count += 1

        time.sleep = sleep
        return self

    def __exit__(self, *exc) -> None:
        time.sleep = self._sleep


def python_steps(flat: BM25Searcher, queries: list[str], repeat: int = 20) -> dict[str, float]:
    """Microseconds per query of each Python step of ``PendingSearch.result`` on one chunk of
    ``queries``, searched once on the Java pool and then timed ``repeat`` times."""
    from bm25aug.lucene.batch import JavaBatch, search_function
    from bm25aug.ranking import PAIRS, anserini_top
    from bm25aug.backend import ANALYZED

    index, n = flat.index, flat.index.depth(1000)
    packed = JavaBatch(search_function(index, ANALYZED, n), queries, 1).future.get()
    steps = {"byte[] to bytes": lambda: [p.tostring() for p in packed]}
    raw = steps["byte[] to bytes"]()
    steps["frombuffer"] = lambda: [np.frombuffer(p, dtype=PAIRS) for p in raw]
    pairs = steps["frombuffer"]()
    steps["complete"] = lambda: [index.complete(p, n, 1000) for p in pairs]
    steps["anserini_top"] = lambda: anserini_top(pairs, 1000, index.id_rank)
    out = {}
    for name, step in steps.items():
        start = time.perf_counter()
        for _ in range(repeat):
            step()
        out[name] = (time.perf_counter() - start) * 1e6 / repeat / len(queries)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--warmup", type=int, default=30, help="batches before measuring")
    p.add_argument("--rounds", type=int, default=5, help="batches measured per thread count")
    args = p.parse_args()
    try:
        dataset = load_dataset(args.dataset)
        flat = BM25Searcher(ensure_index(dataset, "flat"))
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    queries = list(dataset.split(dataset.spec.eval_split).queries.values())
    ties = tie_runs(flat, queries)
    print(f"k=1000: queries searched again with a margin of 16 / 64 hits: {(ties >= 16).sum()} / "
          f"{(ties >= 64).sum()} of {len(queries)} (longest tie past k: {ties.max()} hits)")
    for _ in range(args.warmup):
        flat.batch_search_arrays(queries, 1000, threads=1)
    n, walls = len(queries) * args.rounds, {}
    for threads in (1, 2):
        before, start = thread_ticks(), time.perf_counter()
        with WakeUps() as wake:
            for _ in range(args.rounds):
                flat.batch_search_arrays(queries, 1000, threads=threads)
        wall, after = time.perf_counter() - start, thread_ticks()
        walls[threads] = wall * 1000 / n
        cpu = {g: (t - before.get(g, 0)) * _TICK_MS / n for g, t in after.items() if t > before.get(g, 0)}
        print(f"threads={threads}: wall {walls[threads]:.3f} ms/query; CPU ms/query: "
              + ", ".join(f"{g} {ms:.3f}" for g, ms in sorted(cpu.items(), key=lambda kv: -kv[1])))
        print(f"  waiting: {wake.count / args.rounds:.0f} wake-ups a batch, {wake.cpu_s * 1e6 / max(wake.count, 1):.0f} us "
              f"of CPU each, {wake.cpu_s * 1e6 / n:.1f} us a query")
    # Two busy cores: a query's CPU is about twice the two-thread wall time.
    print(f"2/1 threads {walls[1] / walls[2]:.2f}x; 1.7x needs {2 * (walls[2] - walls[1] / 1.7) * 1000:.0f} us "
          f"less CPU a query")
    steps = python_steps(flat, queries[:256])
    print("Python per query, one chunk: " + ", ".join(f"{k} {v:.1f} us" for k, v in steps.items()))


if __name__ == "__main__":
    main()
