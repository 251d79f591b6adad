"""Multi-threaded search must equal single-threaded search exactly (issue 10): repeat
``batch_search`` with 2 threads and compare every hit list with the 1-thread run.

    python benchmarks/repeat_threads.py --dataset scifact --checkpoint checkpoints/scifact --repeats 20
"""

from __future__ import annotations

import argparse

from bm25aug.data import load_dataset
from bm25aug.experiment import resolve_checkpoint
from bm25aug.index import ensure_index
from bm25aug.search import AugmentedSearcher, BM25Searcher


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--checkpoint", help="also check AugmentedSearcher with this model")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--k", type=int, default=1000)
    args = p.parse_args()
    dataset = load_dataset(args.dataset)
    split = dataset.split(dataset.spec.eval_split)
    qids, queries = list(split.queries), list(split.queries.values())
    searchers = {"bm25-flat": BM25Searcher(ensure_index(dataset, "flat")),
                 "bm25-wp": BM25Searcher(ensure_index(dataset, "wp"))}
    if args.checkpoint:
        checkpoint = resolve_checkpoint(args.checkpoint, args.dataset, False)
        searchers["augmented"] = AugmentedSearcher.from_pretrained(checkpoint, searchers["bm25-wp"].index_dir)
    failed = False
    for name, searcher in searchers.items():
        single = searcher.batch_search(queries, qids, k=args.k, threads=1)
        differing = []
        for _ in range(args.repeats):
            threaded = searcher.batch_search(queries, qids, k=args.k, threads=2)
            differing.append(sum(threaded[q] != single[q] for q in qids))
        failed |= any(differing)
        print(f"{name}: {len(qids)} queries x {args.repeats} repeats with 2 threads; "
              f"hit lists that differ from 1 thread: {sum(differing)}")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
