"""Which trained model an evaluation reads (``--checkpoint``, else ``checkpoints/<dataset>``), how a
row names it, whether it changed the queries at all, and the dev queries its training run held
out (``--split checkpoint-dev``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bm25aug.errors import UserError

# Relative to the working directory unless set, like Pyserini's indexes/ and runs/.
CHECKPOINT_ROOT = Path(os.environ.get("BM25AUG_CHECKPOINT_ROOT", "checkpoints"))
# --split: the queries the checkpoint's training run held out as its dev set (its dev_split.json)
CHECKPOINT_DEV = "checkpoint-dev"
# A term list whose weights over its terms' counts spread less than this (relative) is plain BM25's.
SAME_RATIO = 1e-6


def checkpoint_dev(dataset, checkpoint: Path | None):
    """``--split checkpoint-dev``: the queries ``checkpoint``'s training run held out (``dev_split.json``
    of its run folder: a seeded slice of train, or the dataset's dev split); never a test split."""
    from bm25aug.data.layouts import Split

    path = checkpoint.parent / "dev_split.json" if checkpoint else None
    if path is None or not path.is_file():
        raise UserError(f"--split {CHECKPOINT_DEV} is the dev queries a training run held out, and "
                        f"{checkpoint or 'this method'} has no dev_split.json beside it; fix: pass --checkpoint with "
                        f"the folder train.py wrote, or --split NAME")
    try:
        qids = json.loads(path.read_text(encoding="utf-8"))["qids"]
        qids = set(qids.get(dataset.name, []) if isinstance(qids, dict) else qids)  # several corpora: by name
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is damaged ({type(e).__name__}); fix: restore it from the run, or --split NAME") from None
    source = dataset.split("dev" if "dev" in dataset.splits() else "train")
    if not qids or not qids <= source.queries.keys():
        raise UserError(f"{path} does not name dev queries of {dataset.name}; fix: pass the dataset the model was "
                        f"trained on, or --split NAME")
    return Split(*({q: v for q, v in part.items() if q in qids}
                   for part in (source.queries, source.qrels, source.answers, source.negatives, source.absent)))


def resolve_checkpoint(path: str | None, dataset_name: str, transfer: bool) -> Path:
    """``--checkpoint`` (a model folder, a train.py output folder or a packaged model's bare name,
    found by ``bm25aug.model.loading.locate``), else ``checkpoints/<source>/best``. A packaged
    model's files are checked here, before its settings are read."""
    from bm25aug.data.registry import REGISTRY
    from bm25aug.model import packaged
    from bm25aug.model.loading import locate

    if path:
        folder = locate(path)
        if packaged.is_packaged(folder):
            packaged.check_files(folder)
        return folder
    source = (REGISTRY[dataset_name].transfer_source if transfer and dataset_name in REGISTRY else dataset_name)
    if source is None:
        raise UserError(f"{dataset_name} has no default transfer source; fix: pass --checkpoint DIR")
    default = CHECKPOINT_ROOT / source / "best"
    if not default.is_dir():
        raise UserError(f"no trained model at {default}; fix: run `python train.py --dataset {source}` "
                        f"or pass --checkpoint DIR")
    return default


def described(checkpoint: Path | None) -> str:
    """The model a row used, as eval names it: a packaged model by name and folder, else its folder."""
    from bm25aug.model.packaged import is_packaged

    if checkpoint is None:  # a caller of run_method that passes none
        return "the model"
    if is_packaged(checkpoint):
        return f"the packaged model {checkpoint.name} ({checkpoint.resolve()})"
    return f"the model in {checkpoint.resolve()} (a folder, not a packaged model)"


def plain_bm25(bm25, queries: list[str], term_lists: list[dict[str, float]]) -> bool:
    """Whether every query's term list is its own terms as plain BM25 on ``bm25``'s index counts
    them (those the index has), up to one factor, so that it ranks as plain BM25 does: the model
    changed nothing. False when no query has terms."""
    seen = False
    for query, terms in zip(queries, term_lists):
        own = bm25.query_terms(query)
        if not terms.keys() <= own.keys():
            return False  # an added term
        own = bm25.indexed(own)
        if terms.keys() != own.keys():
            return False  # a term dropped
        if terms:
            ratio = [w / own[t] for t, w in terms.items()]
            if max(ratio) - min(ratio) > SAME_RATIO * max(ratio):
                return False  # reweighted
            seen = True
    return seen
