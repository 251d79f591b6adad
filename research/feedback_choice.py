"""Issue 51, item 3: can a corpus choose, with no judgement, between a model's weighted query alone
(``augmented``) and RM3 on top of it (``augmented-rm3``)?

On our hidden sets RM3 on the general model wins clearly on five and loses on three; picking the
better of the two per corpus would add about +0.01 to the mean. A choice needs a signal that is
there without judgements. For each corpus this script measures:

* **the truth**: the two on real dev queries with their judgements (nDCG@10, or Acc@5 on QA): the
  queries the model's training held out (``Dataset.train_dev``: the dev split, or the recipe's
  seeded slice of train), at most ``--dev`` of them;
* **pseudo**: ``--pseudo`` pseudo-queries made from documents (``bm25aug.adapt.queries``, kind
  ``--kind``), judged as the adapt gate judges its held-out queries (``bm25aug.adapt.gate``: the
  dense teacher over BM25's top 30, mixed with BM25's scores by ``--mix``; the document a query
  was made from left out of the judgements and of both rankings);
* **log**: the same dev queries' texts without their judgements (a query log), judged by the
  teacher the same way.

A signal picks RM3 where RM3's mean nDCG@10 on its judgements is higher. It picks right where its
pick is at least as good as the other on the truth. Nothing here tunes anything: each corpus's
pick uses that corpus alone.

    python research/feedback_choice.py --datasets scifact nfcorpus squad medquad squadshifts-wiki \\
        squadshifts-reddit squadshifts-amazon --record docs/data/feedback_choice.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import numpy as np
import pytrec_eval

from bm25aug.adapt.config import AdaptConfig
from bm25aug.adapt.gate import judged_split
from bm25aug.adapt.queries import PREFIX, make_queries
from bm25aug.adapt.teacher import DenseTeacher
from bm25aug.data.layouts import Split
from bm25aug.data.registry import load_dataset
from bm25aug.eval.metrics import per_query
from bm25aug.io import write_json
from bm25aug.lucene.index import ensure_index
from bm25aug.search.augmented import AugmentedSearcher
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.feedback import RM3Searcher

DEPTH = 30  # the adapt gate's pool: BM25's top this many (train.py's --negative-depth)
SEED = 13  # the general recipe's dev slice


def runs(searchers: dict, queries: dict[str, str], k: int, threads: int, drop_source: bool = False) -> dict:
    """Each searcher's run over ``queries`` ({qid: [Hit]}), the document a pseudo-query was made from dropped."""
    out = {}
    for name, searcher in searchers.items():
        tops = searcher.batch_search_arrays(list(queries.values()), k, threads)
        run = {}
        for qid, top in zip(queries, tops):
            hits = searcher.hits(top)
            run[qid] = [h for h in hits if h.docid != qid[len(PREFIX):]] if drop_source else hits
        out[name] = run
    return out


def judged_ndcg(run: dict, qrels: dict[str, dict[str, int]]) -> float:
    """Mean nDCG@10 of ``run`` over the judged queries."""
    trec = {q: {h.docid: float(len(hits) - i) for i, h in enumerate(hits[:100])} for q, hits in run.items() if q in qrels}
    got = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(trec)
    return float(np.mean([got.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels])) if qrels else float("nan")


def corpus_row(name: str, model: str, args) -> dict:
    dataset = load_dataset(name)
    index = ensure_index(dataset, "flat")
    flat = BM25Searcher(index)
    first = AugmentedSearcher.from_pretrained(model, index)
    searchers = {"augmented": first, "augmented-rm3": RM3Searcher(first)}
    _, dev, how = dataset.train_dev(200, SEED)
    qids = sorted(q for q in dev.queries if dev.qrels.get(q) or dev.answers.get(q))
    qids = set(random.Random(SEED).sample(qids, min(args.dev, len(qids))))
    dev = Split(*({q: v for q, v in part.items() if q in qids}
                  for part in (dev.queries, dev.qrels, dev.answers, dev.negatives, dev.absent)))
    start = time.perf_counter()
    truth_runs = runs(searchers, dev.queries, 100, args.threads)
    truth = {}
    for mode, run in truth_runs.items():
        metric, values = per_query(run, dev, dataset.corpus)
        truth[mode] = float(np.mean([values[q] for q in qids if q in values]))
    teacher = DenseTeacher(flat.index)
    row = {"dataset": name, "dev": how, "dev_queries": len(dev.queries), "metric": metric, "truth": truth, "signals": {}}
    pseudo = make_queries(dataset.corpus, args.kind, args.pseudo, seed=SEED)
    log_queries = {f"log:{q}": t for q, t in dev.queries.items()}
    for signal, queries, drop in (("pseudo", pseudo, True), ("log", log_queries, False)):
        for mix in args.mix:
            judged = judged_split(flat, teacher, queries, DEPTH, AdaptConfig(kind=args.kind, mix=mix), args.threads)
            scored = runs(searchers, judged.queries, 100, args.threads, drop_source=drop)
            means = {mode: judged_ndcg(run, judged.qrels) for mode, run in scored.items()}
            row["signals"][f"{signal}, mix {mix}"] = {"queries": len(judged.queries), **means}
    row["seconds"] = time.perf_counter() - start
    return row


def verdicts(rows: list[dict]) -> dict:
    """Per signal: the corpora it picks right, and the mean truth of its picks against each mode always."""
    out = {}
    for signal in rows[0]["signals"]:
        right, picked = 0, []
        for row in rows:
            s, t = row["signals"][signal], row["truth"]
            pick = "augmented-rm3" if s["augmented-rm3"] > s["augmented"] else "augmented"
            other = "augmented" if pick == "augmented-rm3" else "augmented-rm3"
            row.setdefault("picks", {})[signal] = pick
            right += t[pick] >= t[other]
            picked.append(t[pick])
        out[signal] = {"right": right, "of": len(rows), "mean_picked": float(np.mean(picked))}
    for mode in ("augmented", "augmented-rm3"):
        out[f"always {mode}"] = {"mean_picked": float(np.mean([r["truth"][mode] for r in rows]))}
    out["oracle"] = {"mean_picked": float(np.mean([max(r["truth"].values()) for r in rows]))}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", required=True)
    p.add_argument("--model", default="general")
    p.add_argument("--dev", type=int, default=300, help="at most this many dev queries a corpus")
    p.add_argument("--pseudo", type=int, default=200, help="pseudo-queries a corpus")
    p.add_argument("--kind", default="mix")
    p.add_argument("--mix", type=float, nargs="+", default=[0.5, 0.0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--record")
    args = p.parse_args()
    rows = []
    for name in args.datasets:
        row = corpus_row(name, args.model, args)
        rows.append(row)
        t = row["truth"]
        print(f"{name}: truth ({row['metric']}, {row['dev_queries']} dev queries) augmented {t['augmented']:.4f}, "
              f"augmented-rm3 {t['augmented-rm3']:.4f}; " + "; ".join(
                  f"{s} {v['augmented']:.4f} / {v['augmented-rm3']:.4f}" for s, v in row["signals"].items()), flush=True)
    summary = verdicts(rows)
    for signal, v in summary.items():
        right = f"right on {v['right']} of {v['of']}, " if "right" in v else ""
        print(f"{signal}: {right}mean of the picked mode's truth {v['mean_picked']:.4f}")
    if args.record:
        write_json(args.record, {"command": "python " + " ".join(sys.argv), "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
