"""Which words a trained model adds on its own dev slice, and which of them land on topic.

    python research/added_terms.py --checkpoint runs/levers/scifact/<run> [--top 15]

For the run's seeded dev slice (never a test split), as search sends the queries (gate included):
the words added to the most queries, the added-term precision by weight (the share of the added
weight on terms found in one of the query's judged-relevant documents, as ``eval.py`` reports it)
per band of the added term's document frequency, and the range of the a(q) head's bias (how far
training moved it from its start). It shows where the words the precision counts as misses come
from: rare words that match nothing relevant, or generic ones proposed for many queries.

``--df-floors F ...`` asks what a floor on added words would do, without training one: added words
in fewer than F·N of the searched index's documents are dropped before search (query words always
stay), on the dev slice and on ``--transfer``'s non-test split, served by the same model.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from bm25aug.errors import UserError
from bm25aug.data.registry import load_dataset
from bm25aug.eval.metrics import added_term_precision, added_terms, evaluate_split
from bm25aug.lucene.index import ensure_index
from bm25aug.model.augmenter import QueryAugmenter
from bm25aug.search.augmented import AugmentedSearcher
from bm25aug.search.bm25 import mean_added_terms
from gate import dev_slice
from levers import TRANSFER_SPLIT

BANDS = (0.0, 0.01, 0.05, 1.0)  # df / N: rare, mid, common


def floor_rows(searcher: AugmentedSearcher, dataset, split, floors: list[float]) -> list[str]:
    """Table rows: nDCG@10, added terms per query and precision by weight with added words under
    each df / N floor dropped at search time."""
    bm25 = searcher.bm25
    qids = list(split.queries)
    texts = [split.queries[q] for q in qids]
    lists = [searcher.term_list(t) for t in texts]
    originals = [bm25.query_terms(text) for text in texts]
    rows = []
    for floor in floors:
        kept = [{t: w for t, w in terms.items() if t in original or bm25.index.doc_freq(t) >= floor * bm25.num_docs}
                for terms, original in zip(lists, originals)]
        run = {q: bm25.search_terms(terms) for q, terms in zip(qids, kept)}
        ndcg = evaluate_split(run, split, dataset.corpus)["ndcg@10"]
        precision = added_term_precision(bm25, dict(zip(qids, kept)), split)["added_precision_weight"]
        rows.append(f"| {dataset.name} | {floor:g} | {ndcg:.4f} | {mean_added_terms(bm25, texts, kept):.2f} | {precision:.3f} |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a train.py output dir (its best/ and dev slice are read)")
    p.add_argument("--top", type=int, default=15, help="most frequently added words to list")
    p.add_argument("--df-floors", type=float, nargs="+", help="df / N floors to probe for added words (see above)")
    p.add_argument("--transfer", default="nfcorpus", choices=sorted(TRANSFER_SPLIT),
                   help="dataset whose non-test split (as levers.py scores transfer) the floors are also probed on")
    args = p.parse_args()
    run = Path(args.checkpoint)
    try:
        dataset, dev, _ = dev_slice(run)
        searcher = AugmentedSearcher.from_pretrained(run / "best", ensure_index(dataset, "flat"))
    except (UserError, FileNotFoundError) as e:
        raise SystemExit(f"error: {e}; fix: pass a train.py output dir with best/ and config.json") from None
    qids = list(dev.queries)
    rows = list(added_terms(searcher.bm25, {q: searcher.term_list(dev.queries[q]) for q in qids}, dev))
    per_word = Counter(t for _, t, _, _ in rows)
    print(f"{run}: {len(dev.queries)} dev queries, {len(rows)} added terms")
    print("most often added (queries):", ", ".join(f"{t} ({n})" for t, n in per_word.most_common(args.top)))
    n_docs = searcher.bm25.num_docs
    df = np.array([searcher.bm25.index.doc_freq(t) / n_docs for _, t, _, _ in rows])
    weight = np.array([w for _, _, w, _ in rows])
    found = np.array([f for _, _, _, f in rows], dtype=bool)
    print("| df / N | added terms | added weight | precision by weight |\n|---|---|---|---|")
    for low, high in zip(BANDS, BANDS[1:]):
        band = (df >= low) & (df < high)
        share = weight[band & found].sum() / weight[band].sum() if band.any() else float("nan")
        print(f"| {low:g}–{high:g} | {int(band.sum())} | {weight[band].sum():.2f} | {share:.3f} |")
    bias = QueryAugmenter.from_pretrained(run / "best").aug_head.bias.detach()
    print(f"a(q) head bias: {float(bias.min()):.3f} to {float(bias.max()):.3f}")
    if args.df_floors:
        try:
            other = load_dataset(args.transfer)
            transfer = AugmentedSearcher.from_pretrained(run / "best", ensure_index(other, "flat"))
            transfer_split = other.split(TRANSFER_SPLIT[args.transfer])
            for name, split in ((dataset.name, dev), (args.transfer, transfer_split)):
                if split.answers:  # nDCG@10 and the added-term precision need graded qrels
                    raise UserError(f"{name} is judged by answers, not qrels; fix: probe --df-floors with a "
                                    f"model and a --transfer of BEIR sets")
        except UserError as e:
            raise SystemExit(f"error: {e}") from None
        print("added words under a df / N floor dropped at search time:")
        print("| dataset | floor | nDCG@10 | added terms / query | precision by weight |\n|---|---|---|---|---|")
        print("\n".join(floor_rows(searcher, dataset, dev, args.df_floors)
                        + floor_rows(transfer, other, transfer_split, args.df_floors)))


if __name__ == "__main__":
    main()
