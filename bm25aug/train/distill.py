"""A small, fast student query model distilled from a teacher's outputs on many queries.

    python -m bm25aug.train.distill --teacher general --recipe general-open \\
        --layers 2 --hidden 128 --output-dir runs/general-small [--seed 13] [--resume]

The teacher (a packaged model or a trained checkpoint, through its int8 ONNX encoder, as search
runs it) reads each training query of the recipe's sets alone, and its outputs, w per token and
a(q) on the target's live entries, are kept once per teacher and query list (``teacher.npz`` in
the run folder, with its record). The student (``bm25aug.train.student``) is fitted to them by
``OutputMatchLoss``: no documents, no labels, no index, so a run costs what its forward passes
cost. A seeded slice of the queries (``HELD_OUT``) is never trained on; the epoch with the lowest
loss on it is ``best/``. The run folder has the layout of a training run (``bm25aug_run.json``,
``log.jsonl``, ``best/``, ``last/`` every epoch for ``--resume``), so that ``eval.py
--checkpoint``, ``bm25aug search --model`` and ``python -m bm25aug.model.packaged`` take it.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from bm25aug.errors import UserError
from bm25aug.io import atomic_open, claim_folder, derived_ok, digest, record_derived, source_key, write_json, write_jsonl
from bm25aug.limits import check_all
from bm25aug.progress import progress

HELD_OUT = 0.05  # of the queries, never trained on: model selection
TEACHER_FILE = "teacher.npz"
STATE_FILE = "distill_state.pt"
RUN_MARKER = "bm25aug_run.json"  # the training runs' claim (bm25aug.train.run_folder)


@dataclass
class DistillConfig:
    teacher: str = "general"
    recipe: str = "general-open"
    layers: int = 2
    hidden: int = 128
    epochs: int = 20
    # Up to this many pseudo-queries (a sentence of a sampled document, bm25aug.train.pseudo) from
    # each training corpus, beside its queries: the teacher's outputs on sentence-like queries too.
    pseudo_queries: int = 0
    batch_size: int = 64
    lr: float = 1e-3
    margin: float = 0.1
    aug_weight: float = 1.0  # 0: a w-only student (no a(q) head: bm25aug.train.student)
    seed: int = 13
    threads: int = 2
    # "base": the base encoder's embeddings and first layers (narrower: its embeddings' principal
    # directions, new layers); "teacher": the teacher's own embeddings, layers and w head, read back
    # from its export (bm25aug.train.teacher_weights), at its width.
    start: str = "base"
    keep: str = ""  # with --start teacher: which of its layers, e.g. "0,5" (default: the first --layers)


STARTS = ("base", "teacher")
FLAG_HELP = {"teacher": "the model fitted to: a packaged model's name or a checkpoint folder",
             "recipe": "whose datasets' train queries the teacher reads", "layers": "the student's encoder layers",
             "hidden": "the student's width (a multiple of 64)", "margin": "how far below zero a(q)'s entries that "
             "the teacher leaves out are pushed", "aug_weight": "a(q)'s share of the loss beside w's; 0 makes a w-only "
             "student, whose graph has no a(q) head",
             "pseudo_queries": "pseudo-queries from each training corpus, beside its queries",
             "threads": "torch threads (1 beside other work on two cores)",
             "start": "where the student's weights start: base (the base encoder's) or teacher (the teacher's own "
             "embeddings, layers and w head, at its width)",
             "keep": "with --start teacher, the teacher's layers the student starts from, e.g. 0,5"}


@dataclass
class TeacherOutputs:
    """Per query: the window's token ids, the teacher's w on them, and a(q)'s positive live entries."""

    ids: list[np.ndarray]
    w: list[np.ndarray]
    a_rows: list[np.ndarray]
    a_values: list[np.ndarray]

    def save(self, path: Path) -> None:
        cut = lambda parts: np.cumsum([0] + [len(p) for p in parts])  # noqa: E731
        with atomic_open(path) as f:  # whole or not there
            np.savez(f, ids=np.concatenate(self.ids), w=np.concatenate(self.w), tokens=cut(self.ids),
                     a_rows=np.concatenate(self.a_rows), a_values=np.concatenate(self.a_values), entries=cut(self.a_rows))

    @classmethod
    def load(cls, path: Path) -> "TeacherOutputs":
        with np.load(path) as f:
            tokens, entries = f["tokens"], f["entries"]
            split = lambda x, at: [x[i:j] for i, j in zip(at[:-1], at[1:])]  # noqa: E731
            return cls(split(f["ids"], tokens), split(f["w"], tokens), split(f["a_rows"], entries),
                       split(f["a_values"], entries))


def training_queries(recipe: str, data_dir: str | None, pseudo: int = 0, seed: int = 13) -> list[str]:
    """The train split's queries of every set the recipe trains on, and up to ``pseudo``
    pseudo-queries from each one's corpus, deduplicated, in a fixed order."""
    from bm25aug import recipes
    from bm25aug.data.registry import load_dataset
    from bm25aug.train.pseudo import pseudo_queries

    seen: dict[str, None] = {}
    for name in recipes.datasets(recipe):
        dataset = load_dataset(name, data_dir)
        texts = list(dataset.split("train").queries.values())
        if pseudo:
            texts += list(pseudo_queries(dataset.corpus, pseudo, seed).queries.values())
        for text in texts:
            if text.strip():
                seen.setdefault(text, None)
    if not seen:
        raise UserError(f"recipe {recipe} has no training queries; fix: pass a --recipe that names datasets")
    return list(seen)


def teacher_outputs(teacher, queries: list[str], out: Path) -> TeacherOutputs:
    """The teacher's outputs on each query encoded alone (as search encodes it), from the run
    folder when made before by the same teacher for the same queries."""
    path = out / TEACHER_FILE
    # What the outputs depend on: the graph, the settings (the window among them), the tokenizer, the queries.
    source = source_key("distill-teacher", digest(teacher.onnx_path), json.dumps(asdict(teacher.config), sort_keys=True),
                        digest(teacher.tokenizer.backend_tokenizer.to_str().encode()),
                        digest("\n".join(queries).encode()))
    if derived_ok(path, source):
        return TeacherOutputs.load(path)
    made = TeacherOutputs([], [], [], [])
    for query in progress(queries, desc="teacher", unit="q"):
        batch = teacher.target.batch([query])
        w, a = teacher.outputs(batch)  # a is None for a teacher without a(q) (its graph cut to w)
        rows = np.flatnonzero(a[0] > 0) if a is not None else np.zeros(0, np.int64)
        made.ids.append(batch.input_ids[0].astype(np.int32))
        made.w.append(w[0].astype(np.float32))
        made.a_rows.append(rows.astype(np.int32))
        made.a_values.append(a[0, rows].astype(np.float32) if a is not None else np.zeros(0, np.float32))
    made.save(path)
    record_derived(path, source)
    return made


def collate(data: TeacherOutputs, index: list[int], live: int, pad: int) -> dict[str, torch.Tensor]:
    """A batch of queries: ids and mask (padded), the teacher's w (padded) and a(q) (dense, B x live)."""
    width = max(len(data.ids[i]) for i in index)
    ids = torch.full((len(index), width), pad, dtype=torch.long)
    w = torch.zeros((len(index), width))
    a = torch.zeros((len(index), live))
    for row, i in enumerate(index):
        n = len(data.ids[i])
        ids[row, :n], w[row, :n] = torch.from_numpy(data.ids[i].astype(np.int64)), torch.from_numpy(data.w[i])
        a[row, torch.from_numpy(data.a_rows[i].astype(np.int64))] = torch.from_numpy(data.a_values[i])
    mask = (torch.arange(width).unsqueeze(0) < torch.tensor([len(data.ids[i]) for i in index]).unsqueeze(1)).long()
    return {"ids": ids, "mask": mask, "w": w, "a": a}


def batch_loss(model, loss_fn, batch: dict, rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """The student's ``OutputMatchLoss`` on one batch (``rows``: the target's live entries)."""
    out = model(batch["ids"], batch["mask"], rows=rows)
    real = (batch["mask"].bool() & ~model.special[batch["ids"]]).float()
    return loss_fn(out.token_weights, out.aug_logits, batch["w"], batch["a"], real)


def held_out_loss(model, loss_fn, data: TeacherOutputs, index: list[int], rows, size: int) -> dict[str, float]:
    """The mean loss (and its parts) over the held-out queries, in batches of ``size``."""
    model.eval()
    totals: dict[str, float] = {}
    with torch.no_grad():
        for start in range(0, len(index), size):
            part = index[start:start + size]
            for name, value in batch_loss(model, loss_fn, collate(data, part, len(rows), model.tokenizer.pad_token_id),
                                          rows).items():
                totals[name] = totals.get(name, 0.0) + float(value) * len(part)
    model.train()
    return {name: value / len(index) for name, value in totals.items()}


def split_queries(n: int, seed: int) -> tuple[list[int], list[int]]:
    """A seeded held-out slice (``HELD_OUT``) and the rest, as indexes into the query list."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    cut = max(1, int(n * HELD_OUT))
    return sorted(order[cut:]), sorted(order[:cut])


def distill(config: DistillConfig, out: Path, data_dir: str | None = None, resume: bool = False) -> Path:
    """Train the student into ``out`` (see the module's text); returns ``out / "best"``."""
    from bm25aug.model.loading import load_encoder

    check_settings(config)
    teacher = load_encoder(config.teacher, "onnx-int8")
    start = teacher_start(teacher, config)  # its shape checked before the folder is made
    lock = claim_folder(out, RUN_MARKER, "a distillation run", "--output-dir")
    try:
        _refuse_other_run(out, config, resume)
        torch.set_num_threads(config.threads)
        queries = training_queries(config.recipe, data_dir, config.pseudo_queries, config.seed)
        fit(teacher, queries, config, out, resume, start)
    finally:
        lock.release()
    return out / "best"


def check_settings(config: DistillConfig) -> None:
    """Refuse a setting out of its range in one line, before the run folder is made and before the
    teacher's pass: a learning rate above 0 (0 would save the untrained student as ``best/``);
    epochs, batch size and threads of 1 or more, pseudo-queries of 0 or more and the seed, in the
    ranges training has (``bm25aug.limits``); the student's shape; a finite margin and a(q) weight
    of 0 or more (NaN would train NaN weights)."""
    from bm25aug.train.student import student_shape

    if not 0 < config.lr <= 1:  # NaN fails this too
        raise UserError(f"--lr {config.lr}; fix: pass a learning rate above 0 and at most 1, e.g. 1e-3")
    check_all(config)
    student_shape(config.layers, config.hidden)
    for flag, value, fix in (("--margin", config.margin, "0 or more, e.g. 0.1"),
                             ("--aug-weight", config.aug_weight, "0 (a w-only student) or more")):
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"{flag} {value}; fix: pass {fix}")
    if config.start not in STARTS:
        raise UserError(f"--start {config.start}; fix: pass one of {', '.join(STARTS)}")
    if config.keep and config.start != "teacher":
        raise UserError(f"--keep {config.keep} names the teacher's layers, and --start {config.start} takes none of "
                        f"them; fix: add --start teacher, or drop --keep")
    kept_layers(config)


def kept_layers(config: DistillConfig) -> list[int] | None:
    """``--keep``'s layer numbers (None: the first ``--layers``)."""
    if not config.keep:
        return None
    try:
        return [int(part) for part in config.keep.split(",")]
    except ValueError:
        raise UserError(f"--keep {config.keep}; fix: pass the teacher's layer numbers, comma-separated, e.g. "
                        f"0,5") from None


def teacher_start(teacher, config: DistillConfig) -> dict[str, torch.Tensor] | None:
    """With ``--start teacher``, the teacher's own weights (read back from its export), once the
    student's shape and ``--keep`` fit them; else None."""
    if config.start != "teacher":
        return None
    from bm25aug.train.student import check_start
    from bm25aug.train.teacher_weights import teacher_state

    start = teacher_state(teacher.onnx_path)
    check_start(start, config.layers, config.hidden, kept_layers(config))
    return start


def fit(teacher, queries: list[str], config: DistillConfig, out: Path, resume: bool = False,
        start: dict[str, torch.Tensor] | None = None) -> None:
    """The teacher's outputs on ``queries`` (from ``out`` when kept), then a seeded student
    fitted to them in ``out`` (``_train``), started from ``start`` (``teacher_start``) when given;
    the folder is the caller's to claim."""
    from bm25aug.train.losses import OutputMatchLoss
    from bm25aug.train.student import make_student

    data = teacher_outputs(teacher, queries, out)
    torch.manual_seed(config.seed)  # the teacher's pass draws nothing from torch: the student's start is the seed's
    model = make_student(teacher.config, config.layers, config.hidden, augmentation=config.aug_weight > 0,
                         start=start, keep=kept_layers(config))
    loss_fn = OutputMatchLoss(float(model.config.weight_floor), config.margin, config.aug_weight)
    _train(model, loss_fn, data, torch.from_numpy(model.target.live), config, out, resume)


def _refuse_other_run(out: Path, config: DistillConfig, resume: bool) -> None:
    """A folder with a run in it is continued only with ``--resume``, and only with its own settings
    (``--threads`` aside)."""
    saved = out / "distill.json"
    if saved.is_file():
        if not resume:
            raise UserError(f"{out} already holds a distillation run; fix: pass --resume to continue it, or choose "
                            f"another --output-dir")
        try:
            before = json.loads(saved.read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"{saved} is unreadable ({type(e).__name__}); fix: restore it, or choose another "
                            f"--output-dir") from None
        if changed := changed_settings(before, config):
            raise UserError(f"{out} was distilled with other settings ({', '.join(changed)}); fix: pass the same ones, "
                            f"or choose another --output-dir")
    write_json(saved, asdict(config))


def changed_settings(before: dict, config: DistillConfig) -> list[str]:
    """The settings of a saved run (``distill.json``) that ``config`` does not share, ``--threads``
    aside. The epochs set the learning-rate schedule's length: another count is another run."""
    defaults = asdict(DistillConfig())  # a run saved before a setting existed had its default
    return [k for k, v in asdict(config).items() if k != "threads" and before.get(k, defaults[k]) != v]


def _train(model, loss_fn, data: TeacherOutputs, rows, config: DistillConfig, out: Path, resume: bool) -> None:
    """Epochs of AdamW over the training slice (linear warm-up and decay); after each, the
    held-out loss, ``last/`` and, when it is the lowest so far, ``best/``."""
    train, held = split_queries(len(data.ids), config.seed)
    steps = config.epochs * -(-len(train) // config.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    warm = max(1, steps // 20)  # 5% of the steps
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / max(1, steps - warm)))
    first, best = _resumed(model, optimizer, schedule, out, resume)
    rng = random.Random(config.seed)
    for _ in range(first):
        rng.shuffle(train)  # the same order a run that never stopped would have had
    pad = model.tokenizer.pad_token_id
    model.train()
    for epoch in range(first + 1, config.epochs + 1):
        rng.shuffle(train)
        start = time.perf_counter()
        batches = [train[i:i + config.batch_size] for i in range(0, len(train), config.batch_size)]
        for index in progress(batches, desc=f"epoch {epoch}", unit="batch"):
            loss = batch_loss(model, loss_fn, collate(data, index, len(rows), pad), rows)["total"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        scores = held_out_loss(model, loss_fn, data, held, rows, 256)
        row = {"epoch": epoch, "dev_metric": -scores["total"], "dev_metric_name": "-distill_loss (held-out queries)",
               **{f"held_out_{k}": v for k, v in scores.items()}, "seconds": time.perf_counter() - start}
        if best is None or row["dev_metric"] > best:
            best = row["dev_metric"]
            model.save_pretrained(out / "best")
        with open(out / "log.jsonl", "a") as f:  # before last/: a resume drops rows past last/'s epoch
            f.write(json.dumps(row) + "\n")
        _save_last(model, optimizer, schedule, epoch, best, out)
        print(f"epoch {epoch}: held-out loss {scores['total']:.4f} (w {scores['w']:.4f}, a {scores['a']:.4f})",
              file=sys.stderr)


def _save_last(model, optimizer, schedule, epoch: int, best: float, out: Path) -> None:
    from bm25aug.io import atomic_dir

    with atomic_dir(out / "last", STATE_FILE, what="a distillation run's last epoch") as tmp:
        model.write_files(tmp)
        torch.save({"optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(), "epoch": epoch,
                    "best": best, "rng": torch.get_rng_state()}, tmp / STATE_FILE)


def _resumed(model, optimizer, schedule, out: Path, resume: bool) -> tuple[int, float | None]:
    """The epoch ``last/`` ended and the best held-out score so far (0, None: a new run); the
    model, optimizer and schedule are loaded from it."""
    from safetensors.torch import load_file

    from bm25aug.model.augmenter import WEIGHTS_NAME

    state_file = out / "last" / STATE_FILE
    if not (resume and state_file.is_file()):
        return 0, None
    try:
        state = torch.load(state_file, weights_only=True)
        model.load_state_dict(load_file(str(out / "last" / WEIGHTS_NAME)))
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["rng"])  # dropout's draws go on as in a run that never stopped
        epoch, best = int(state["epoch"]), float(state["best"])
    except Exception as e:  # torch's unpickler and safetensors raise many types for a damaged file
        raise UserError(f"{out / 'last'} is damaged ({type(e).__name__}), so the run cannot be resumed from it; fix: "
                        f"start the run again without --resume in another --output-dir") from None
    log = out / "log.jsonl"
    if log.is_file():  # an epoch logged after last/ was written, by a run stopped before its next last/
        rows = [line for line in log.read_text().splitlines() if line.strip()]
        write_jsonl(log, [r for r in map(json.loads, rows) if r["epoch"] <= epoch])
    return epoch, best


def main(argv: list[str] | None = None) -> None:
    import argparse

    defaults = DistillConfig()
    parser = argparse.ArgumentParser(prog="python -m bm25aug.train.distill", description=__doc__.split("\n\n")[0])
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value,
                            help=f"{FLAG_HELP.get(name, '')} (default: {value})".strip())
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its last/")
    args = parser.parse_args(argv)
    config = DistillConfig(**{k: getattr(args, k) for k in asdict(defaults)})
    try:
        best = distill(config, args.output_dir, args.data_dir, args.resume)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"student: {best}")


if __name__ == "__main__":
    main()
