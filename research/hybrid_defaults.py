"""Which fusion a hybrid should default to, chosen on the shared sets' dev splits.

    python research/hybrid_defaults.py [--json-out docs/data/hybrid_defaults.json]

For each dev split (SciFact train, NFCorpus dev, SQuAD train: the queries the general model's
choices were made on; no test query is read), the sparse side (bm25-flat, and the packaged
``general``) and the dense peer (bge-small-en-v1.5) each search once to depth 1000; every
candidate fusion of ``bm25aug.search.hybrid`` (reciprocal rank fusion, and normalised score
interpolation at sparse weights 0.1 to 0.9, each over the top 1000 of each side) is then
applied to those lists with the product's own ``fuse``, and scored as eval.py scores (nDCG@10;
SQuAD: Acc@5, its dev metric). The default is the candidate with the best mean over the three
sets for the ``general`` hybrid; the bm25-flat hybrid's numbers are recorded beside it, and the
two hybrids are compared query by query at the product's default fusion (a paired t-test).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.eval.metrics import evaluate_split, per_query
from bm25aug.io import write_json
from bm25aug.lucene.index import ensure_index
from bm25aug.search.augmented import AugmentedSearcher
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.dense import DenseSearcher
from bm25aug.search.hybrid import Fusion, HybridSearcher, fuse

DEV = (("scifact", "train"), ("nfcorpus", "dev"), ("squad", "train"))
DEPTH = 1000


def candidates() -> list[Fusion]:
    return [Fusion("rrf", depth=DEPTH)] + [Fusion("interpolation", weight=w / 10, depth=DEPTH) for w in range(1, 10)]


def main_metric(metrics: dict) -> float:
    return metrics["acc@5"] if "acc@5" in metrics else metrics["ndcg@10"]


def score(searcher, tops, qids, split, dataset) -> dict:
    return evaluate_split({q: searcher.hits(t) for q, t in zip(qids, tops)}, split, dataset.corpus)


def paired(a: dict[str, float], b: dict[str, float]) -> dict:
    """Per-query differences a - b: their mean, how many queries went each way, and a two-sided
    paired t-test's p-value."""
    from scipy.stats import ttest_rel

    qids = sorted(a)
    x, y = np.array([a[q] for q in qids]), np.array([b[q] for q in qids])
    return {"mean_diff": float(np.mean(x - y)), "better": int(np.sum(x > y)), "worse": int(np.sum(x < y)),
            "p": float(ttest_rel(x, y).pvalue) if np.any(x != y) else 1.0}


def one_set(name: str, split_name: str, threads: int) -> dict:
    dataset = load_dataset(name)
    split = dataset.split(split_name)
    qids, texts = list(split.queries), list(split.queries.values())
    k = 100 if dataset.is_qa else 1000
    index = ensure_index(dataset, "flat", threads=threads)
    sides = {"bm25-flat": BM25Searcher(index, flavor="flat"), "general": AugmentedSearcher.from_pretrained("general", index)}
    dense = DenseSearcher(sides["bm25-flat"].index)
    start = time.perf_counter()
    dense_tops = dense.batch_search_arrays(texts, DEPTH, threads)
    per_side = {}
    out = {"split": split_name, "queries": len(qids), "k": k,
           "dense": {**score(dense, [t for t in dense_tops], qids, split, dataset), "search_s": time.perf_counter() - start}}
    for side, searcher in sides.items():
        start = time.perf_counter()
        tops = searcher.batch_search_arrays(texts, DEPTH, threads)
        out[side] = {**score(searcher, tops, qids, split, dataset), "search_s": time.perf_counter() - start}
        hybrid = HybridSearcher(searcher, dense)
        chosen = [fuse(s, d, k, hybrid.fusion, hybrid.id_order) for s, d in zip(tops, dense_tops)]  # the default
        per_side[side] = per_query({q: hybrid.hits(t) for q, t in zip(qids, chosen)}, split, dataset.corpus)[1]
        out[f"{side}-hybrid"] = {}
        for fusion in candidates():
            fused = [fuse(s, d, k, fusion, hybrid.id_order) for s, d in zip(tops, dense_tops)]
            out[f"{side}-hybrid"][fusion.describe()] = score(hybrid, fused, qids, split, dataset)
            print(f"{name}/{split_name} {side} {fusion.describe()}: {main_metric(out[f'{side}-hybrid'][fusion.describe()]):.4f}",
                  flush=True)
    out["default_general_vs_bm25_hybrid"] = paired(per_side["general"], per_side["bm25-flat"])
    return out


def choose(results: dict) -> dict:
    """Per candidate, the mean main metric over the sets, for each partner; the best for general."""
    table = {}
    for fusion in candidates():
        name = fusion.describe()
        table[name] = {side: float(np.mean([main_metric(r[f"{side}-hybrid"][name]) for r in results.values()]))
                       for side in ("bm25-flat", "general")}
    best = max(table, key=lambda n: table[n]["general"])
    return {"means": table, "chosen": best}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json-out", default="docs/data/hybrid_defaults.json")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    results = {name: one_set(name, split, args.threads) for name, split in DEV}
    chosen = choose(results)
    write_json(Path(args.json_out), {"command": "python research/hybrid_defaults.py", "sets": results, **chosen})
    print(f"chosen: {chosen['chosen']} (mean {chosen['means'][chosen['chosen']]})")


if __name__ == "__main__":
    main()
