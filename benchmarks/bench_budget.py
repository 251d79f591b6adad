"""The static query side's added-term budget: quality against QPS, every row in one run.

    python benchmarks/bench_budget.py --checkpoint checkpoints/scifact-static [--budgets 0 1 2 4 8]
        [--record docs/data/budget.json]

For each budget (``added_budget``: at most that many added terms a query, its heaviest; 0: all) the
same trained model searches SciFact: nDCG@10 on the dev queries its run held out (where the default
is chosen) and on test, the added terms a query, and the QPS of one batch over the test queries on
1 and 2 threads (query text in, the model's lookups included), with bm25-flat's in the same run:
``timing.paired_qps``, every path in turn in each of 9 rounds, the ratio the median of the rounds'. The budget is applied to the trained
model as search applies it (``StaticQueryModel``); ``docs/speed.md`` is generated from the record.
"""

from __future__ import annotations

import argparse
import sys



from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.eval.checkpoints import checkpoint_dev, resolve_checkpoint
from bm25aug.eval.metrics import evaluate_split
from bm25aug.io import write_json
from bm25aug.lucene.index import ensure_index
from bm25aug.model.loading import load_encoder
from bm25aug.search.augmented import AugmentedSearcher
from bm25aug.search.bm25 import BM25Searcher, mean_added_terms
from timing import paired_qps


def quality(searcher, split, corpus) -> tuple[float, float | None]:
    """nDCG@10 of ``split``, and the mean added terms a query (None for plain BM25)."""
    qids = list(split.queries)
    queries = [split.queries[q] for q in qids]
    run = {q: searcher.hits(top) for q, top in zip(qids, searcher.batch_search_arrays(queries, 100))}
    if not isinstance(searcher, AugmentedSearcher):
        return evaluate_split(run, split, corpus)["ndcg@10"], None
    lists = [searcher.term_list(q) for q in queries]
    return evaluate_split(run, split, corpus)["ndcg@10"], mean_added_terms(searcher.bm25, queries, lists)


def _with_budget(model, budget: int, searcher: AugmentedSearcher, queries: list[str], k: int, threads: int):
    """One batch search with ``budget`` set on the shared model."""
    model.config.added_budget = budget
    return searcher.batch_search_arrays(queries, k, threads=threads)


def run(dataset_name: str, checkpoint, budgets: list[int], k: int, trained: list = ()) -> dict:
    """``trained``: models trained with a budget in the loop (their own ``added_budget``), as rows of their own."""
    dataset = load_dataset(dataset_name)
    test = dataset.split(dataset.spec.eval_split)
    dev = checkpoint_dev(dataset, checkpoint)
    flat = BM25Searcher(ensure_index(dataset, "flat"))
    model = load_encoder(checkpoint)
    if model.config.query_side != "static":
        raise UserError(f"{checkpoint} is a {model.config.query_side} model; fix: pass a static one (train.py "
                        f"--query-side static)")
    queries = list(test.queries.values())
    rows = [{"budget": "bm25-flat", "dev_ndcg@10": quality(flat, dev, dataset.corpus)[0],
             "test_ndcg@10": quality(flat, test, dataset.corpus)[0]}]
    paths = {"bm25-flat": lambda q, n: flat.batch_search_arrays(q, k, threads=n)}
    for budget in budgets:  # query text in: the static model's lookups included
        model.config.added_budget = budget
        searcher = AugmentedSearcher(model, flat)
        dev_ndcg, _ = quality(searcher, dev, dataset.corpus)
        test_ndcg, added = quality(searcher, test, dataset.corpus)
        rows.append({"budget": budget, "dev_ndcg@10": dev_ndcg, "test_ndcg@10": test_ndcg, "added_terms": added})
        paths[budget] = lambda q, n, s=searcher, b=budget: _with_budget(model, b, s, q, k, n)
    for other in trained:
        searcher = AugmentedSearcher(load_encoder(other), flat)
        name = f"{searcher.encoder.config.added_budget}, trained with it ({other})"
        dev_ndcg, _ = quality(searcher, checkpoint_dev(dataset, other), dataset.corpus)
        test_ndcg, added = quality(searcher, test, dataset.corpus)
        rows.append({"budget": name, "dev_ndcg@10": dev_ndcg, "test_ndcg@10": test_ndcg, "added_terms": added})
        paths[name] = lambda q, n, s=searcher: s.batch_search_arrays(q, k, threads=n)
    for t in (1, 2):
        measured = paired_qps(paths, queries * 3, t)  # 900 queries a batch: one batch takes about a second
        for row in rows:
            got = measured[row["budget"]]
            row.update({f"qps_{t}t": got["qps"], f"qps_{t}t_over_flat": got["over_first"]})
    return {"dataset": dataset_name, "checkpoint": str(checkpoint), "k": k, "test_queries": len(queries), "batch": 3 * len(queries),
            "dev_queries": len(dev.queries), "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--checkpoint", default="checkpoints/scifact-static")
    p.add_argument("--budgets", type=int, nargs="+", default=[0, 1, 2, 4, 6, 8, 12])
    p.add_argument("--trained", nargs="*", default=[], help="static models trained with a budget in the loop")
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--record", help="write the run where docs/speed.md's budget table is generated from")
    args = p.parse_args()
    try:
        result = run(args.dataset, resolve_checkpoint(args.checkpoint, args.dataset, False), args.budgets, args.k,
                     [resolve_checkpoint(t, args.dataset, False) for t in args.trained])
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    result["command"] = "python " + " ".join(sys.argv)
    for row in result["rows"]:
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()})
    if args.record:
        write_json(args.record, result)


if __name__ == "__main__":
    main()
