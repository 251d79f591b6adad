"""A training run's folder: who may write it, and whether a ``--resume`` is the same run.

Layout: ``bm25aug_run.json`` (the claim) · ``config.json`` · ``data.json`` · ``dev_split.json`` ·
``hard_negatives.<dataset>.json`` (one per training corpus) · ``log.jsonl`` · ``curves.png`` · ``last/`` (model + ``trainer_state.pt``,
every epoch, for ``--resume``) · ``best/`` (best dev, with its model card) · ``selection.json``
(whether ``best/`` beat plain BM25 on dev).
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.io import write_json
from bm25aug.lucene.index import IndexMeta
from bm25aug.model.augmenter import CONFIG_NAME
from bm25aug.model.card import run_ended
from bm25aug.train.arguments import TrainConfig, saved_value
from bm25aug.train.corpora import run_name

RUN_MARKER = "bm25aug_run.json"  # claims a training output folder (bm25aug.io.claim_folder)
# Settings a --resume may change: the epoch count (checked apart), where and how it runs, and the
# gate and significance check, which act on best/ after training.
_MAY_CHANGE = ("epochs", "threads", "output_dir", "gate_quantile", "device", "significance")


def refuse_finished(out: Path, resume: bool) -> None:
    """A run folder with a model in it (best/ or last/) is continued with --resume, never trained
    over. Without a usable last/ (a stop while it was written, or removed), --resume restarts an
    unfinished run from its first epoch (``restarts``); an ended one (its best/ has the run's card)
    is continued from its model with --init-from instead."""
    finished = [name for name in ("best", "last") if (out / name).exists()]
    if finished and not resume:
        raise UserError(f"{out} already holds a training run ({' and '.join(finished)}/); fix: pass --resume "
                        f"to continue it, or choose another --output-dir")
    if resume and restarts(out) and run_ended(out / "best"):
        raise UserError(f"{out} holds an ended run and no last/ to continue it from; fix: train on from its model "
                        f"with --init-from {out / 'best'} --output-dir NEW_FOLDER")


def restarts(out: Path) -> bool:
    """Whether a --resume of ``out`` starts again from the first epoch: it holds best/ but no
    last/ with the trainer's state."""
    return (out / "best").exists() and not (out / "last" / "trainer_state.pt").exists()


def trained_epochs(out: Path) -> int:
    """The last epoch the run's log records (0 when none)."""
    return max((h.get("epoch", 0) for h in read_jsonl(out / "log.jsonl")), default=0)


def damaged_last(out: Path, why: str) -> UserError:
    """The error for a last/ that cannot be read back (``why``), with the fix that continues the run."""
    if run_ended(out / "best"):
        fix = f"train on from its model with --init-from {out / 'best'} --output-dir NEW_FOLDER"
    else:
        fix = (f"remove {out / 'last'} and rerun with --resume, which restarts the run from its first epoch "
               f"(best/ stays until a better epoch replaces it)")
    return UserError(f"cannot resume from {out / 'last'}: {why}; fix: {fix}")


def earlier_run(folder: Path) -> bool:
    """A run folder written before folders were claimed with a marker: its settings, and a
    checkpoint bm25aug wrote (last/ with the trainer's state, or best/ with the model config)."""
    try:
        saved = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    ours = (folder / "last" / "trainer_state.pt").exists() or (folder / "best" / CONFIG_NAME).exists()
    return isinstance(saved, dict) and {"dataset", "lam"} <= saved.keys() and ours


def check_resumed_corpus(out: Path, fingerprint: str, files: list) -> None:
    """``--resume`` on the corpora the saved run trained on (their fingerprints, in ``data.json``)."""
    data = out / "data.json"
    if data.exists() and read_json(data).get("corpus_fingerprint") != fingerprint:
        raise UserError(f"--resume on other corpora than the saved run's ({', '.join(map(str, files))} changed, or are "
                        f"other datasets); fix: pass the run's datasets, or a new --output-dir")


def record_run(config: TrainConfig, datasets: list, indexes: list[Path], resume: bool) -> None:
    """On --resume, the saved run must be this one: the same settings, the same corpora (their
    fingerprints, in ``data.json``), and no more epochs trained than now asked for. Then this
    run's settings and data are recorded."""
    out = Path(config.output_dir)
    saved, data = out / "config.json", out / "data.json"
    corpus = "+".join(IndexMeta.load(index, probe=False).corpus_fingerprint for index in indexes)
    if resume:
        check_resumed_corpus(out, corpus, [d.corpus_file for d in datasets])
    if resume and saved.exists():
        old = read_json(saved)
        changed = [f.name for f in fields(TrainConfig)
                   if f.name not in _MAY_CHANGE and saved_value(old, f.name) != getattr(config, f.name)]
        if changed:
            raise UserError(f"--resume with settings that differ from the saved run ({', '.join(changed)}); "
                            f"fix: rerun with the same settings or a new --output-dir")
    trained = trained_epochs(out) if resume else 0
    if trained > config.epochs:
        raise UserError(f"--resume with --epochs {config.epochs}, but the saved run has trained {trained}; "
                        f"fix: pass --epochs {trained} or more")
    write_json(saved, asdict(config))
    write_json(data, {"dataset": run_name(datasets), "paths": [str(d.path) for d in datasets],
                      "corpus_fingerprint": corpus})


def read_json(path: Path) -> dict:
    """A run folder's JSON record; a damaged one is one error line."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise UserError(f"{path} is damaged ({type(e).__name__}); fix: restore it, or train into a new "
                        f"--output-dir") from None
    if not isinstance(saved, dict):
        raise UserError(f"{path} is damaged (not a JSON object); fix: restore it, or train into a new --output-dir")
    return saved


def read_jsonl(path: Path) -> list[dict]:
    """A run folder's log, one JSON object a line; a damaged one is one error line."""
    if not path.exists():
        return []
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (ValueError, OSError) as e:
        raise UserError(f"{path} is damaged ({type(e).__name__}); fix: restore it, or train into a new "
                        f"--output-dir") from None
    if not all(isinstance(r, dict) for r in rows):
        raise UserError(f"{path} is damaged (a line is not a JSON object); fix: restore it, or train into a new "
                        f"--output-dir")
    return rows
