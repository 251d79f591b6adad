"""Our RM3 (bm25aug.search.feedback) against Pyserini's on the same bag-of-words queries.

    python research/rm3_parity.py --dataset scifact nfcorpus squad [--queries 1000]

For each dataset's test queries (the first ``--queries``): the top 1000 of ``RM3Searcher`` over
``BM25Searcher`` (one batch) and of Pyserini's ``LuceneSearcher.set_rm3()`` (query by query);
prints how many queries differ in hits or scores, and both runs' seconds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.lucene.index import ensure_index
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.feedback import RM3Searcher
from bm25aug.search.peers import ExpansionSearcher


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", nargs="+", default=["scifact"])
    p.add_argument("--queries", type=int, help="the first N test queries (default: all)")
    args = p.parse_args()
    for name in args.dataset:
        try:
            dataset = load_dataset(name)
            index = ensure_index(dataset, "flat")
        except UserError as e:
            raise SystemExit(f"error: {e}") from None
        queries = list(dataset.split(dataset.spec.eval_split).queries.values())[:args.queries]
        start = time.perf_counter()
        ours = RM3Searcher(BM25Searcher(index)).batch_search_arrays(queries, 1000)
        ours_s, start = time.perf_counter() - start, time.perf_counter()
        pyserini = ExpansionSearcher(index, "rm3")
        theirs = [pyserini.search_arrays(q, 1000) for q in queries]
        theirs_s = time.perf_counter() - start
        differ = sum(not (np.array_equal(a.lucene_ids, b.lucene_ids) and np.array_equal(a.scores, b.scores))
                     for a, b in zip(ours, theirs))
        print(f"{name}: {len(queries)} queries, {differ} differ; ours {ours_s:.1f} s, Pyserini's {theirs_s:.1f} s")


if __name__ == "__main__":
    main()
