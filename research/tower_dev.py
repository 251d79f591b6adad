"""Issue 76, item 3: a dense query tower confirmed on the labelled dev splits the hybrid's fusion
was chosen on, against bge-small's own query encoder.

    python research/tower_dev.py --tower FOLDER [--sets scifact:train nfcorpus:dev ...] [--json-out F]

The splits are ``research/hybrid_defaults.py``'s ``DEV`` (a SQuADShifts set's "dev slice" is the
200 train queries general-open held out); no test query is read. On each, the dense peer searches
with the default model (``DEFAULT_DENSE_MODEL``: bge's int8 corpus, its fp32 query encoder) and
with the tower (the same corpus vectors, the tower's queries), and the packaged ``general``
searches; each dense run is then fused with general's at the hybrid's default fusion
(``DEFAULT_FUSION``) by the product's own ``fuse``. Scored as eval.py scores (nDCG@10; the QA
sets: Acc@5). Printed per set, then the means: the tower's share of bge's dense score (the bar:
92.5%) and the tower hybrid's difference from bge's (the bar: within .005).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.io import write_json
from bm25aug.lucene.index import ensure_index
from bm25aug.search.augmented import AugmentedSearcher
from bm25aug.search.dense import DenseSearcher
from bm25aug.search.hybrid import DEFAULT_FUSION, fuse

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from hybrid_defaults import DEV, dev_split, main_metric, score  # noqa: E402

DEPTH = 1000


def one_set(name: str, split_name: str, tower: str, threads: int) -> dict:
    dataset = load_dataset(name)
    split = dev_split(dataset, split_name)
    qids, texts = list(split.queries), list(split.queries.values())
    k = 100 if dataset.is_qa else DEPTH
    index = ensure_index(dataset, "flat", threads=threads)
    general = AugmentedSearcher.from_pretrained("general", index)
    sparse = general.batch_search_arrays(texts, DEPTH, threads)
    out = {"split": split_name, "queries": len(qids), "general": score(general, sparse, qids, split, dataset)}
    for side, model in (("bge", None), ("tower", tower)):
        dense = DenseSearcher(general.bm25.index, model)
        start = time.perf_counter()
        tops = dense.batch_search_arrays(texts, DEPTH, threads)
        out[side] = {**score(dense, tops, qids, split, dataset), "search_s": time.perf_counter() - start}
        fused = [fuse(s, d, k, DEFAULT_FUSION, general.bm25.index.id_rank) for s, d in zip(sparse, tops)]
        out[f"{side}-hybrid"] = score(dense, fused, qids, split, dataset)
    print(f"{name}/{split_name} ({len(qids)} queries): dense bge {main_metric(out['bge']):.4f}, tower "
          f"{main_metric(out['tower']):.4f}; hybrid bge {main_metric(out['bge-hybrid']):.4f}, tower "
          f"{main_metric(out['tower-hybrid']):.4f}", flush=True)
    return out


def summary(results: dict) -> dict:
    """The means over the sets of each side's main metric, the tower's share of bge's dense mean
    and the tower hybrid's difference from bge's."""
    means = {side: float(np.mean([main_metric(r[side]) for r in results.values()]))
             for side in ("general", "bge", "tower", "bge-hybrid", "tower-hybrid")}
    return {"means": means, "tower_share_of_bge_dense": means["tower"] / means["bge"],
            "tower_hybrid_minus_bge_hybrid": means["tower-hybrid"] - means["bge-hybrid"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tower", required=True, help="a tower folder (python -m bm25aug.train.tower_build)")
    p.add_argument("--sets", nargs="+", default=[f"{n}:{s}" for n, s in DEV], help="NAME:SPLIT, as DEV names them")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json-out")
    args = p.parse_args()
    try:
        results = {s: one_set(*s.split(":", 1), args.tower, args.threads) for s in args.sets}
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    total = summary(results)
    print(f"means over {len(results)} sets: dense bge {total['means']['bge']:.4f}, tower {total['means']['tower']:.4f} "
          f"({total['tower_share_of_bge_dense']:.1%}); hybrid bge {total['means']['bge-hybrid']:.4f}, tower "
          f"{total['means']['tower-hybrid']:.4f} ({total['tower_hybrid_minus_bge_hybrid']:+.4f})")
    if args.json_out:
        write_json(args.json_out, {"command": "python " + shlex.join(sys.argv), "sets": results, **total})


if __name__ == "__main__":
    main()
