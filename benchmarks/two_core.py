"""What two cores allow a batch search: the CPU a query costs in Python and in Java, and what that
leaves for the SciFact throughput goals of augmented search.

    python benchmarks/two_core.py [--dataset scifact] [--checkpoint checkpoints/scifact]
        [--encode-batch-size N] [--record docs/data/two_core.json]

For bm25-flat, augmented, and augmented with its term lists encoded beforehand (Lucene's part of
an augmented query alone): QPS of one ``batch_search_arrays`` over the split's queries (k=1000) on
1 and 2 threads (``timing.qps``, as ``bench_search.py``; it also warms the JIT up), then the CPU
a query costs on one thread, split into the Python thread's (``time.thread_time``: the encoding,
for augmented, and Anserini's order of the hits) and the rest of the process's (Lucene's pool,
the JIT, the GC).

What follows (``bm25aug.reproduce.tables.two_core_table`` prints it), P and J being one thread's
CPU a query in Python and in Java, estimates measured apart from the QPS:

* CPU ceiling. Two cores do at most 2,000 ms of CPU a second, so, assuming a query costs at least
  as much CPU on two threads as on one, two threads answer at most 2,000 / (P + J) queries a
  second, and at most 2 t1 / (P + J) times as many as one thread taking t1 ms a query. Augmented
  at 0.5x bm25-flat's two-thread QPS needs its P + J at most 4,000 / (bm25-flat's QPS) ms.
* Steady state (a batch long enough that preparing and searching overlap throughout; a
  300-query batch prepares its first 256 queries while Java waits): one thread runs Python's part
  and Java's side by side, taking about max(P, J) a query, so two over one is about
  2 max(P, J) / (P + J), and 1.7x needs the smaller part to be at most 0.3 / 1.7 of the larger.
"""

from __future__ import annotations

import argparse
import sys
import time

from timing import qps

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.eval.checkpoints import resolve_checkpoint
from bm25aug.io import write_json
from bm25aug.lucene.index import ensure_index
from bm25aug.reproduce.tables import two_core_table
from bm25aug.search.augmented import AugmentedSearcher

K = 1000


def cpu_split(batch, items: list, rounds: int = 10) -> tuple[float, float]:
    """ms of CPU a query on one thread: Python's thread (this one, which encodes and ranks) and the
    rest of the process (Java's pool, JIT and GC threads), over ``rounds`` batches of a warm JVM."""
    py, total = time.thread_time(), time.process_time()
    for _ in range(rounds):
        batch(items, 1)
    py, total = time.thread_time() - py, time.process_time() - total
    n = rounds * len(items)
    return py * 1000 / n, (total - py) * 1000 / n


def run(dataset_name: str, checkpoint: str, encode_batch_size: int | None = None) -> dict:
    dataset = load_dataset(dataset_name)
    checkpoint = resolve_checkpoint(checkpoint, dataset_name, False)
    augmented = AugmentedSearcher.from_pretrained(checkpoint, ensure_index(dataset, "flat"),
                                                  encode_batch_size=encode_batch_size)
    flat = augmented.bm25
    queries = list(dataset.split(dataset.spec.eval_split).queries.values())
    term_lists = augmented.term_lists(queries)
    paths = {
        "bm25-flat": (lambda q, n: flat.batch_search_arrays(q, K, threads=n), queries),
        "augmented": (lambda q, n: augmented.batch_search_arrays(q, K, threads=n), queries),
        "augmented, pre-encoded": (lambda t, n: flat.batch_search_terms_arrays(t, K, threads=n), term_lists),
    }
    out = {}
    for name, (batch, items) in paths.items():
        one, two = qps(batch, items, 1), qps(batch, items, 2)
        python_ms, java_ms = cpu_split(batch, items)
        out[name] = {"python_ms": python_ms, "java_ms": java_ms, "qps_1t": one, "qps_2t": two}
    return {"dataset": dataset.name, "num_queries": len(queries), "k": K, "checkpoint": str(checkpoint),
            "encode_batch_size": encode_batch_size, "paths": out}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--checkpoint", default="checkpoints/scifact", help="a train.py output dir or a model dir")
    p.add_argument("--encode-batch-size", type=int,
                   help="queries a forward pass of augmented's encoder (default: one by one, as search does)")
    p.add_argument("--record", help="write the run where docs/speed.md's two-core table is generated from "
                                    "(docs/data/two_core.json), with this command")
    args = p.parse_args()
    try:
        result = run(args.dataset, args.checkpoint, args.encode_batch_size)
    except UserError as e:  # e.g. no such model, or no ../shared/data: one line, as the CLI prints it
        raise SystemExit(f"error: {e}") from None
    print(f"{result['dataset']}, {result['num_queries']} queries, k={result['k']}, {result['checkpoint']}\n")
    print(two_core_table(result))
    if args.record:
        write_json(args.record, {"command": "python " + " ".join(sys.argv), **result})


if __name__ == "__main__":
    main()
