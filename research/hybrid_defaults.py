"""Which fusion a hybrid should default to, chosen on the shared sets' dev splits.

    python research/hybrid_defaults.py [--sets NAME ...] [--json-out docs/data/hybrid_defaults.json]

The dev splits (``DEV``; no test query is read): SciFact train, NFCorpus dev and SQuAD train (the
queries the general model's choices were made on), MedQuAD dev, and each SQuADShifts set's dev
slice (the 200 train queries, seed 13, that the general-open run held out of training:
``Dataset.train_dev``). On each, the sparse side (bm25-flat, and the packaged ``general``) and
the dense peer (``DEFAULT_DENSE_MODEL``) each search once to depth 1000; every candidate fusion of
``bm25aug.search.hybrid`` (reciprocal rank fusion, and normalised score interpolation at sparse
weights 0.05 to 0.95, each over the top 1000 of each side) is then applied to those lists with the
product's own ``fuse``, and scored as eval.py scores (nDCG@10; the QA sets: Acc@5, their dev
metric).

The default (``choose``) is, for the ``general`` hybrid, the candidate with the best mean over the
``CHOOSE_ON`` sets (zero-shot for general) among those never more than ``SHORTFALL`` below the
better of its two halves (general alone, the dense peer alone) on any of them; when none is, the
one whose worst shortfall is least. Every set's numbers are recorded, and the worst shortfall over
all of them beside (``worst_shortfall_all``). ``--rechoose`` applies the rule again to a recorded
``--json-out`` without searching again. The bm25-flat
hybrid's numbers are recorded beside it, and the two hybrids are compared query by query at the
product's default fusion (a paired t-test).
"""

from __future__ import annotations

import argparse
import sys
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

SLICE = "dev slice"  # a set without a dev split: the slice of train its training held out
DEV = (("scifact", "train"), ("nfcorpus", "dev"), ("squad", "train"), ("squadshifts-wiki", SLICE),
       ("squadshifts-reddit", SLICE), ("squadshifts-amazon", SLICE), ("medquad", "dev"))
def _held_out() -> tuple[int, int]:
    """general-open's dev slice: its recipe's dev_size and seed (TrainConfig's, where it sets none)."""
    from bm25aug import recipes
    from bm25aug.train.arguments import TrainConfig

    chosen = {**{"dev_size": TrainConfig.dev_size, "seed": TrainConfig.seed}, **recipes.settings("general-open")}
    return int(chosen["dev_size"]), int(chosen["seed"])


DEV_SIZE, SEED = _held_out()
DEPTH = 1000
SHORTFALL = 0.005  # how far below the better of its halves the default may be, on any set
# The sets the default is chosen on: the corpora general-open never trains on (zero-shot for the
# packaged general, as the held-out corpora are). MedQuAD's and the SQuADShifts sets' dev queries
# are held out of its training, but their corpora are its training corpora: recorded beside, not chosen on.
CHOOSE_ON = ("scifact", "nfcorpus", "squad")


def candidates() -> list[Fusion]:
    return [Fusion("rrf", depth=DEPTH)] + [Fusion("interpolation", weight=w / 20, depth=DEPTH) for w in range(1, 20)]


def dev_split(dataset, split_name: str):
    """The split's queries: a named split, or the dev slice general-open held out of training."""
    return dataset.train_dev(DEV_SIZE, SEED)[1] if split_name == SLICE else dataset.split(split_name)


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
    split = dev_split(dataset, split_name)
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


def shortfall(result: dict, side: str, name: str) -> float:
    """The hybrid's main metric minus the better of its two halves' (negative: below it)."""
    better = max(main_metric(result[side]), main_metric(result["dense"]))
    return main_metric(result[f"{side}-hybrid"][name]) - better


def choose(results: dict) -> dict:
    """Per candidate, the mean main metric over the sets and the worst shortfall below the better
    half, for each partner; the default for general (module docstring)."""
    chosen_on = {n: r for n, r in results.items() if n in CHOOSE_ON}
    table, worst, worst_all = {}, {}, {}
    for fusion in candidates():
        name = fusion.describe()
        table[name] = {side: float(np.mean([main_metric(r[f"{side}-hybrid"][name]) for r in chosen_on.values()]))
                       for side in ("bm25-flat", "general")}
        for out, sets in ((worst, chosen_on), (worst_all, results)):
            out[name] = {side: float(min(shortfall(r, side, name) for r in sets.values()))
                         for side in ("bm25-flat", "general")}
    within = [n for n in table if worst[n]["general"] >= -SHORTFALL]
    best = max(within, key=lambda n: table[n]["general"]) if within else max(worst, key=lambda n: worst[n]["general"])
    return {"chosen_on": list(chosen_on), "means": table, "worst_shortfall": worst, "worst_shortfall_all": worst_all,
            "shortfall_bar": SHORTFALL, "chosen": best, "chosen_within_bar": bool(within)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json-out", default="docs/data/hybrid_defaults.json")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sets", nargs="+", choices=[name for name, _ in DEV], default=[name for name, _ in DEV],
                   help="the dev sets to choose on (default: all of DEV)")
    p.add_argument("--rechoose", action="store_true", help="apply the rule again to the recorded --json-out")
    p.add_argument("--merge", action="store_true", help="add --sets to the recorded --json-out's (replacing "
                                                          "those named), then choose on the whole")
    args = p.parse_args()
    if args.rechoose and args.merge:
        sys.exit("--rechoose searches nothing, so there is nothing to --merge; fix: pass one of the two")
    if args.rechoose:
        import json

        recorded = json.loads(Path(args.json_out).read_text())
        again = "python research/hybrid_defaults.py --rechoose"
        command = recorded["command"] if recorded["command"].endswith(again) else f"{recorded['command']}; {again}"
        write_json(Path(args.json_out), {"command": command, "sets": recorded["sets"],
                                         **choose(recorded["sets"])})
        return
    from bm25aug.dense import DEFAULT_DENSE_MODEL

    results = {name: one_set(name, split, args.threads) for name, split in DEV if name in args.sets}
    results = {name: {**r, "dense_model": DEFAULT_DENSE_MODEL} for name, r in results.items()}
    command = " ".join(["python research/hybrid_defaults.py", *sys.argv[1:]])
    if args.merge:
        import json

        if not Path(args.json_out).is_file():
            sys.exit(f"--merge adds to a recorded run, and {args.json_out} is not there; fix: run without --merge first")
        recorded = json.loads(Path(args.json_out).read_text())
        results = {**{n: r for n, r in recorded["sets"].items() if n not in results}, **results}
        command = f"{recorded['command']}; {command}"
    chosen = choose(results)
    write_json(Path(args.json_out), {"command": command, "sets": results, **chosen})
    print(f"chosen: {chosen['chosen']} (mean {chosen['means'][chosen['chosen']]})")


if __name__ == "__main__":
    main()
