"""Which words a trained model adds on its own dev slice, and which of them land on topic.

    python benchmarks/added_terms.py --checkpoint runs/levers/scifact/<run> [--top 15]

For the run's seeded dev slice (never a test split), as search sends the queries (gate included):
the words added to the most queries, the added-term precision by weight (the share of the added
weight on terms found in one of the query's judged-relevant documents, as ``eval.py`` reports it)
per band of the added term's document frequency, and the range of the a(q) head's bias (how far
training moved it from its start). It shows where the words the precision counts as misses come
from: rare words that match nothing relevant, or generic ones proposed for many queries.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from bm25aug.errors import UserError
from bm25aug.evaluation import added_terms
from bm25aug.index import ensure_index
from bm25aug.model import QueryAugmenter
from bm25aug.search import AugmentedSearcher
from gate import dev_slice

BANDS = (0.0, 0.01, 0.05, 1.0)  # df / N: rare, mid, common


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a train.py output dir (its best/ and dev slice are read)")
    p.add_argument("--top", type=int, default=15, help="most frequently added words to list")
    args = p.parse_args()
    run = Path(args.checkpoint)
    try:
        dataset, dev, _ = dev_slice(run)
        searcher = AugmentedSearcher.from_pretrained(run / "best", ensure_index(dataset, "flat"))
    except (UserError, FileNotFoundError) as e:
        raise SystemExit(f"error: {e}; fix: pass a train.py output dir with best/ and config.json") from None
    qids = list(dev.queries)
    rows = list(added_terms(searcher.searcher, dict(zip(qids, searcher.term_lists([dev.queries[q] for q in qids]))), dev))
    per_word = Counter(t for _, t, _, _ in rows)
    print(f"{run}: {len(dev.queries)} dev queries, {len(rows)} added terms")
    print("most often added (queries):", ", ".join(f"{t} ({n})" for t, n in per_word.most_common(args.top)))
    n_docs = searcher.searcher.num_docs
    df = np.array([searcher.searcher.index.doc_freq(t) / n_docs for _, t, _, _ in rows])
    weight = np.array([w for _, _, w, _ in rows])
    found = np.array([f for _, _, _, f in rows], dtype=bool)
    print("| df / N | added terms | added weight | precision by weight |\n|---|---|---|---|")
    for low, high in zip(BANDS, BANDS[1:]):
        band = (df >= low) & (df < high)
        share = weight[band & found].sum() / weight[band].sum() if band.any() else float("nan")
        print(f"| {low:g}–{high:g} | {int(band.sum())} | {weight[band].sum():.2f} | {share:.3f} |")
    bias = QueryAugmenter.from_pretrained(run / "best").aug_head.bias.detach()
    print(f"a(q) head bias: {float(bias.min()):.3f} to {float(bias.max()):.3f}")


if __name__ == "__main__":
    main()
