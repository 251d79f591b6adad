"""Issue 75, item 2: how faithfully a student ranks as its teacher does, with no labels.

    python research/student_fidelity.py --teacher general --students runs/student/A runs/student/B \\
        [--sets medquad:test squadshifts-wiki:test] [--json-out F]

For each set (a dataset and a split that no distillation trains on, by default the test queries
of general-open's four sets: a query is read, never its judgements), every query is searched on the set's flat index by the teacher and by each student,
1000 hits a query. A student's fidelity is the mean nDCG@10 of its ranking against the teacher's
top 10 taken as the relevant documents (graded 10 for the teacher's first down to 1 for its tenth),
and the Pearson correlation of the two term lists' weights over the terms either gives a query.
Both need no labels, so they can be measured on thousands of queries, where a dev split's gain of
+.007 cannot separate two students. bm25-flat's ranking is measured beside them: the agreement a
model-free query already has with the teacher. Each set's numbers are printed, then their mean over queries.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.eval.metrics import evaluate_qrels
from bm25aug.lucene.index import ensure_index
from bm25aug.search.augmented import AugmentedSearcher
from bm25aug.search.bm25 import BM25Searcher

# The test queries of general-open's own sets: no distillation reads them (it takes train splits),
# and no dev split that a student is confirmed on is among them.
SETS = ("medquad:test", "squadshifts-wiki:test", "squadshifts-reddit:test", "squadshifts-amazon:test")
DEPTH = 1000
BM25 = "bm25-flat"


def teacher_qrels(run: dict[str, list]) -> dict[str, dict[str, int]]:
    """The teacher's top 10 of each query as graded judgements (its first document 10, its tenth 1)."""
    return {qid: {hit.docid: 10 - rank for rank, hit in enumerate(hits[:10])} for qid, hits in run.items()}


def weight_correlation(a: dict[str, float], b: dict[str, float]) -> float | None:
    """Pearson's r of two term lists' weights over the terms either holds (None: fewer than 2, or flat)."""
    terms = sorted(set(a) | set(b))
    if len(terms) < 2:
        return None
    x, y = np.array([a.get(t, 0.0) for t in terms]), np.array([b.get(t, 0.0) for t in terms])
    if x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def one_set(spec: str, teacher: str, students: list[str], threads: int) -> dict:
    name, _, split = spec.partition(":")
    dataset = load_dataset(name)
    queries = dataset.split(split or dataset.spec.eval_split).queries
    qids, texts = list(queries), list(queries.values())
    index = ensure_index(dataset, "flat")
    reference = AugmentedSearcher.from_pretrained(teacher, index)
    teacher_run = reference.batch_search(texts, qids, k=DEPTH, threads=threads)
    teacher_lists = reference.term_lists(texts)
    qrels = teacher_qrels(teacher_run)
    row = {"queries": len(qids), "students": {}}
    for student in [BM25, *students]:  # bm25-flat: how far from the teacher ranking with no model is
        searcher = BM25Searcher(index) if student == BM25 else AugmentedSearcher.from_pretrained(student, index)
        run = searcher.batch_search(texts, qids, k=DEPTH, threads=threads)
        ndcg = evaluate_qrels(run, qrels)["ndcg@10"]  # over the queries the teacher found anything for
        rs = [] if student == BM25 else \
            [r for r in map(weight_correlation, teacher_lists, searcher.term_lists(texts)) if r is not None]
        r = float(np.mean(rs)) if rs else float("nan")
        row["students"][student] = {"ndcg@10_vs_teacher": ndcg, "weight_r": r}
        print(f"{spec} ({len(qids)} queries) {student}: nDCG@10 against the teacher's top 10 {ndcg:.4f}, "
              f"term weights r {r:.4f}", flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", default="general")
    p.add_argument("--students", nargs="+", required=True)
    p.add_argument("--sets", nargs="+", default=list(SETS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json-out")
    args = p.parse_args()
    try:
        rows = {spec: one_set(spec, args.teacher, args.students, args.threads) for spec in args.sets}
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    total = sum(r["queries"] for r in rows.values())
    for student in [BM25, *args.students]:
        mean = {m: sum(r["students"][student][m] * r["queries"] for r in rows.values()) / total
                for m in ("ndcg@10_vs_teacher", "weight_r")}
        print(f"mean over {total} queries, {student}: nDCG@10 against the teacher {mean['ndcg@10_vs_teacher']:.4f}, "
              f"term weights r {mean['weight_r']:.4f}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"command": " ".join(sys.argv), "teacher": args.teacher, "sets": rows}, f, indent=2)


if __name__ == "__main__":
    main()
