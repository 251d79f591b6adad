"""A small dense query tower distilled from bge-small-en-v1.5 (issue 76, phase 1: research).

    python -m bm25aug.train.tower --keep 0,1 --epochs 3 --seed 13 --threads 1 --output-dir runs/tower/NAME

The tower is bge-small cut down: its own embeddings and the layers ``--keep`` names, read back
from its fp32 ONNX export (``bm25aug.train.tower_weights``). It is fitted, without labels, to put
a query's unit [CLS] vector where bge's is for the same text, the instruction included (loss
1 - cosine), so that it can stand in for bge's query encoder against bge's own corpus vectors.

The texts (``training_texts``): the train queries of general-open's four sets (less the dev
slices held out of training, the 200 queries a SQuADShifts set's dev split is cut from) and of
NFCorpus, and up to ``--pseudo`` pseudo-queries of each of those five corpora; any text that is
also a dev or test query of a shared set is dropped. bge fp32's vectors of them are computed once
(``teacher_vectors``, kept under ``~/.cache/bm25aug/tower-teacher/`` by the model's and the
texts' digest). A seeded ``HELD_OUT`` share is never trained on: its loss after each epoch picks
the epoch saved. The run folder holds the tower as a transformers folder with bge's
``tokenizer.json``, its ONNX export (``model.onnx``: input_ids, attention_mask, token_type_ids →
last_hidden_state, as bge's; ``bge-small-en-v1.5=FOLDER`` loads it as a dense model),
``log.jsonl`` (one row an epoch) and ``tower.json`` (settings, sizes, seconds, load average).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, atomic_open, keep_recent_files, source_key, write_json, write_jsonl
from bm25aug.progress import progress, quiet_libraries
from bm25aug.train.tower_weights import (MAX_TOKENS, bge_onnx_path, cls_vectors, make_student, padded, parse_keep,
                                         teacher_bert, tokenizer)

RECIPE = "general-open"
EXTRA_TRAIN = ("nfcorpus",)  # train queries beside the recipe's: a dev split is NFCorpus's dev, not its train
# Every query of these splits is barred from training: the test splits, and the dev splits a tower is confirmed on.
BARRED = {"scifact": ("train", "test"), "nfcorpus": ("dev", "test"), "squad": ("train", "test"),
          "medquad": ("dev", "test"), "squadshifts-wiki": ("test",), "squadshifts-reddit": ("test",),
          "squadshifts-amazon": ("test",)}
HELD_OUT = 0.02
TEACHER = "bge-small-en-v1.5-fp32"
TEACHER_DIR = CACHE_ROOT / "tower-teacher"
TEACHER_FILES = 8  # the cache's files kept (a text list's vectors and their record: 4 lists)
RECORD, LOG = "tower.json", "log.jsonl"
SORT_CHUNK = 50  # batches whose texts are sorted by length together (less padding), then shuffled


@dataclass
class TowerConfig:
    keep: str = "0,1"
    epochs: int = 3
    batch_size: int = 64
    lr: float = 2e-4
    warmup: float = 0.05  # of the steps, the learning rate's linear rise; then a linear fall to 0
    weight_decay: float = 0.01
    pseudo: int = 8000  # pseudo-queries (bm25aug.train.pseudo) of each training corpus, at most
    seed: int = 13
    threads: int = 1
    dropout: float = 0.0  # the student's (bge trained at 0.1); 0: its vector is fitted as it is served
    limit: int = 0  # a seeded sample of this many texts (a smoke run); 0: all
    train_words: bool = False  # train the word embeddings too (else bge's own, frozen: 25% faster a step)


def _held_out_split() -> tuple[int, int]:
    """general-open's dev slice: its recipe's dev_size and seed (research/hybrid_defaults.py's)."""
    from bm25aug import recipes
    from bm25aug.train.arguments import TrainConfig

    chosen = {"dev_size": TrainConfig.dev_size, "seed": TrainConfig.seed, **recipes.settings(RECIPE)}
    return int(chosen["dev_size"]), int(chosen["seed"])


def barred_texts(data_dir: str | None) -> set[str]:
    """Every dev and test query's text of the shared sets (``BARRED``, and each of the recipe's
    sets' dev slice), stripped."""
    from bm25aug.data.registry import load_dataset

    dev_size, seed = _held_out_split()
    barred: set[str] = set()
    for name, splits in BARRED.items():
        dataset = load_dataset(name, data_dir)
        for split in splits:
            barred.update(t.strip() for t in dataset.split(split).queries.values())
        if "dev" not in dataset.splits():
            barred.update(t.strip() for t in dataset.train_dev(dev_size, seed)[1].queries.values())
    return barred


def training_texts(data_dir: str | None, pseudo: int, seed: int = 13) -> list[str]:
    """The tower's texts in a fixed order (see the module's text), deduplicated."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.train.distill import training_queries
    from bm25aug.train.pseudo import pseudo_queries

    texts = training_queries(RECIPE, data_dir, pseudo, seed)
    for name in EXTRA_TRAIN:
        dataset = load_dataset(name, data_dir)
        texts += list(dataset.split("train").queries.values())
        if pseudo:
            texts += list(pseudo_queries(dataset.corpus, pseudo, seed).queries.values())
    barred = barred_texts(data_dir)
    kept = list(dict.fromkeys(t for t in texts if t.strip() and t.strip() not in barred))
    if not kept:
        raise UserError("no training text is left once the dev and test queries are dropped; fix: point "
                        "BM25AUG_DATA_DIR at the shared sets")
    return kept


def teacher_vectors(texts: list[str], threads: int = 1, root: Path = TEACHER_DIR, model=None) -> np.ndarray:
    """bge fp32's unit query vectors of ``texts`` (the instruction prepended), batched; kept once
    per model and text list in ``root``."""
    from bm25aug.dense.loading import load_dense_model

    model = model or load_dense_model(TEACHER, threads=threads)
    path = root / f"{source_key('tower-teacher', model.digest, texts)}.npy"
    try:
        vectors = np.load(path)
        if vectors.shape == (len(texts), model.dim):
            os.utime(path)  # used: the last to go (keep_recent_files)
            return vectors
    except (OSError, ValueError):  # none yet, or a damaged one: made again
        pass
    start, parts = time.perf_counter(), []
    for at in progress(range(0, len(texts), 1024), desc="bge query vectors", unit="chunk"):
        parts.append(model.encode_queries(texts[at:at + 1024]))
    vectors = np.concatenate(parts) if parts else np.zeros((0, model.dim), np.float32)
    with atomic_open(path) as f:
        np.save(f, vectors)
    write_json(path.with_suffix(".json"), {"model": model.name, "model_digest": model.digest, "texts": len(texts),
                                           "seconds": time.perf_counter() - start})
    keep_recent_files(root, TEACHER_FILES)
    return vectors


def token_rows(texts: list[str], tok=None) -> list[np.ndarray]:
    """Each text's token ids with bge's query instruction prepended (cut at ``MAX_TOKENS``)."""
    from bm25aug.dense.models import BGE

    tok = tok or tokenizer()
    return [np.asarray(e.ids, np.int32) for e in tok.encode_batch([BGE.query_prefix + t for t in texts])]


def cosine_loss(student, ids: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean 1 - cosine between the student's unit [CLS] vectors and the teacher's."""
    return (1 - (cls_vectors(student, ids, mask) * targets).sum(-1)).mean()


def train_step(student, optimizer, rows: list[np.ndarray], targets: torch.Tensor, schedule=None) -> float:
    """One step on one batch; the batch's loss before it."""
    student.train()
    ids, mask = padded(rows)
    loss = cosine_loss(student, ids, mask, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if schedule is not None:
        schedule.step()
    return float(loss.detach())


def mean_loss(student, rows: list[np.ndarray], targets: np.ndarray, batch: int = 128) -> float:
    """The mean loss over ``rows``, in eval mode (no dropout)."""
    student.eval()
    total = 0.0
    order = np.argsort([len(r) for r in rows], kind="stable")
    with torch.no_grad():
        for at in range(0, len(order), batch):
            part = order[at:at + batch]
            ids, mask = padded([rows[i] for i in part])
            total += float(cosine_loss(student, ids, mask, torch.from_numpy(targets[part]))) * len(part)
    return total / max(1, len(rows))


def epoch_batches(index: list[int], rows: list[np.ndarray], size: int, rng: random.Random) -> list[list[int]]:
    """``index`` shuffled into batches of ``size``, each chunk of ``SORT_CHUNK`` batches sorted by
    length first (a batch pads to its longest text), the batches then shuffled."""
    order = list(index)
    rng.shuffle(order)
    batches = []
    for at in range(0, len(order), size * SORT_CHUNK):
        chunk = sorted(order[at:at + size * SORT_CHUNK], key=lambda i: len(rows[i]))
        batches += [chunk[i:i + size] for i in range(0, len(chunk), size)]
    rng.shuffle(batches)
    return batches


def split_texts(n: int, seed: int) -> tuple[list[int], list[int]]:
    """A seeded held-out share (``HELD_OUT``, at least one text) and the rest, as indexes."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    cut = max(1, int(n * HELD_OUT))
    return sorted(order[cut:]), sorted(order[:cut])


def optimizer_for(student, config: TowerConfig, steps: int):
    student.embeddings.word_embeddings.weight.requires_grad_(config.train_words)
    trained = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=config.lr, weight_decay=config.weight_decay)
    warm = max(1, int(steps * config.warmup))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm))))
    return optimizer, schedule


def fit(student, rows: list[np.ndarray], targets: np.ndarray, config: TowerConfig, out: Path) -> list[dict]:
    """Train ``student`` on ``rows`` against ``targets``; it ends with the weights of the epoch of
    least held-out loss. One row an epoch, also written to ``log.jsonl`` as it goes."""
    train, held = split_texts(len(rows), config.seed)
    held_rows, held_targets = [rows[i] for i in held], targets[held]
    rng = random.Random(config.seed)
    steps = config.epochs * -(-len(train) // config.batch_size)
    optimizer, schedule = optimizer_for(student, config, steps)
    log = [{"epoch": 0, "held_out_loss": mean_loss(student, held_rows, held_targets), "seconds": 0.0}]
    best, start = log[0]["held_out_loss"], time.perf_counter()
    best_state = {k: v.detach().clone() for k, v in student.state_dict().items()}
    for epoch in range(1, config.epochs + 1):
        losses = []
        for batch in progress(epoch_batches(train, rows, config.batch_size, rng), desc=f"epoch {epoch}", unit="batch"):
            losses.append(train_step(student, optimizer, [rows[i] for i in batch],
                                     torch.from_numpy(targets[batch]), schedule))
        held_loss = mean_loss(student, held_rows, held_targets)
        log.append({"epoch": epoch, "train_loss": float(np.mean(losses)), "held_out_loss": held_loss,
                    "held_out_cosine": 1 - held_loss, "seconds": time.perf_counter() - start,
                    "load_average": os.getloadavg()[0]})
        write_jsonl(out / LOG, log)
        if held_loss < best:
            best, best_state = held_loss, {k: v.detach().clone() for k, v in student.state_dict().items()}
    student.load_state_dict(best_state)
    return log


class _States(torch.nn.Module):
    """The exported graph: bge's inputs and output."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state


def export_onnx(student, path: Path) -> float:
    """``student`` as an fp32 ONNX graph at ``path``; the largest difference of its states from
    torch's on a sample."""
    import warnings

    import onnxruntime as ort

    wrapper = _States(student).eval()  # the export restores the wrapper's mode to its children: eval
    saved, student.config._attn_implementation = student.config._attn_implementation, "eager"
    ids, mask = padded([[101, 2054, 2003, 1037, 3231, 102], [101, 7592, 102]])
    sample = (ids, mask, torch.zeros_like(ids))
    try:
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper, sample, str(path), opset_version=17, dynamo=False,
                              input_names=["input_ids", "attention_mask", "token_type_ids"],
                              output_names=["last_hidden_state"],
                              dynamic_axes={n: {0: "batch", 1: "tokens"} for n in
                                            ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")})
            want = wrapper(*sample).numpy()
    finally:
        student.config._attn_implementation = saved
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                             "token_type_ids": np.zeros_like(ids.numpy())})[0]
    return float(np.abs(got - want)[mask.numpy().astype(bool)].max())


def train_tower(config: TowerConfig, out: Path, data_dir: str | None = None) -> dict:
    """The whole run into ``out`` (see the module's text); returns its record."""
    import shutil

    kept = parse_keep(config.keep)
    check_settings(config)
    if (out / RECORD).exists():
        raise UserError(f"{out} already holds a tower run ({RECORD}); fix: choose another --output-dir")
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    texts = training_texts(data_dir, config.pseudo, config.seed)
    if config.limit and config.limit < len(texts):
        texts = [texts[i] for i in sorted(random.Random(config.seed).sample(range(len(texts)), config.limit))]
    start = time.perf_counter()
    targets = teacher_vectors(texts, config.threads)
    teacher_seconds = time.perf_counter() - start
    student = make_student(teacher_bert(), kept, config.dropout)
    rows = token_rows(texts)
    load_before, start = os.getloadavg(), time.perf_counter()
    log = fit(student, rows, targets, config, out)
    train_seconds = time.perf_counter() - start
    quiet_libraries()
    student.save_pretrained(out)
    shutil.copyfile(bge_onnx_path().parent / "tokenizer.json", out / "tokenizer.json")
    onnx_diff = export_onnx(student, out / "model.onnx")
    record = {"command": " ".join(["python -m bm25aug.train.tower", *sys.argv[1:]]), "config": asdict(config),
              "kept_layers": kept, "texts": len(texts), "held_out": len(split_texts(len(texts), config.seed)[1]),
              "teacher_seconds": teacher_seconds, "train_seconds": train_seconds,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "best_epoch": min(log, key=lambda r: r["held_out_loss"])["epoch"],
              "best_held_out_cosine": 1 - min(r["held_out_loss"] for r in log), "onnx_max_abs_diff": onnx_diff,
              "max_tokens": MAX_TOKENS}
    write_json(out / RECORD, record)
    return record


def check_settings(config: TowerConfig) -> None:
    """Each numeric setting in its range, in one line, before any work."""
    for flag, value, ok in (("--epochs", config.epochs, config.epochs >= 1),
                            ("--batch-size", config.batch_size, config.batch_size >= 1),
                            ("--threads", config.threads, config.threads >= 1),
                            ("--pseudo", config.pseudo, config.pseudo >= 0),
                            ("--limit", config.limit, config.limit >= 0),
                            ("--lr", config.lr, 0 < config.lr <= 1),
                            ("--warmup", config.warmup, 0 <= config.warmup < 1),
                            ("--weight-decay", config.weight_decay, 0 <= config.weight_decay < 1),
                            ("--dropout", config.dropout, 0 <= config.dropout < 1)):
        if not ok:
            raise UserError(f"{flag} {value} is out of range; fix: see `python -m bm25aug.train.tower --help`")


def main(argv: list[str] | None = None) -> None:
    import argparse

    defaults = TowerConfig()
    parser = argparse.ArgumentParser(prog="python -m bm25aug.train.tower", description=__doc__.split("\n\n")[0])
    for name, value in asdict(defaults).items():
        flag, shown = f"--{name.replace('_', '-')}", f"(default: {value})"
        if isinstance(value, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=value, help=shown)
        else:
            parser.add_argument(flag, type=type(value), default=value, help=shown)
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    config = TowerConfig(**{k: getattr(args, k) for k in asdict(defaults)})
    try:
        record = train_tower(config, args.output_dir, args.data_dir)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps({k: record[k] for k in ("texts", "train_seconds", "best_epoch", "best_held_out_cosine")}))


if __name__ == "__main__":
    main()
