"""Scale benchmark: SciFact padded with real-sentence distractors to 10k, 100k and 1M passages.

    python benchmarks/scale.py [--sizes 10000 100000 1000000] [--json-out F] [--checkpoint DIR]

The corpus is SciFact's 5,183 documents plus deterministic distractor passages, each 3-7
sentences drawn (seeded) from the real sentences of the other shared corpora (NFCorpus, SQuAD),
so vocabulary and term statistics are real. SciFact's queries and qrels judge it. Folders go to
``runs/scale/scifact_pad<N>`` (written once, then reused), indexes to ``indexes/``.

Each step runs in its own process, so that its peak RSS (JVM included) is its own:

* build: flat and wp index build seconds, docs/s, peak RSS, and its two parts' peaks: anonymous
  memory (the JVM heap, Python's objects) and file-backed memory (mapped index segments, which
  the kernel drops under pressure);
* train: ``Trainer`` setup (hard-negative mining on the padded index, the document rows that
  training reads) seconds and peak RSS, then seconds per training step (default settings);
* search: p50 of bm25-flat, bm25-wp and augmented (``--checkpoint``, trained on SciFact), k=1000,
  one thread, over the first 100 SciFact test queries (eval's latency sample), after one
  unmeasured pass of bm25-flat that warms the JVM, and their nDCG@10 over all 300 against the
  padded corpus.

It ends with a line extrapolating time and memory to NQ's 21M passages: a least-squares line in
the corpus size through every size run (three or more), a value whose line falls below zero left
out. ``--steps build`` runs only the builds (no table, the line still printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bm25aug.io import atomic_open
from bm25aug.reproduce.tables import extrapolate, scale_table

SCIFACT_DOCS = 5183
ROOT = Path("runs/scale")
STEPS = ("build-flat", "build-wp", "train", "search")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


# ------------------------------------------------------------------------------------------ corpus
def sentence_pool() -> list[str]:
    """Real sentences of NFCorpus and SQuAD (5 to 60 words), in a fixed order."""
    from bm25aug.data.registry import load_dataset

    pool = []
    for name in ("nfcorpus", "squad"):
        for _, doc in load_dataset(name).corpus.items():
            pool.extend(s for s in _SENTENCE.split(doc.text) if 5 <= len(s.split()) <= 60)
    return pool


def padded_corpus(size: int, seed: int = 0) -> Path:
    """``runs/scale/scifact_pad<size>``: SciFact plus ``size - 5183`` distractors (BEIR layout;
    queries and qrels link to SciFact's). Written to a temp file and renamed; reused once there."""
    from bm25aug.data.registry import load_dataset

    folder = ROOT / f"scifact_pad{size}"
    corpus = folder / "corpus.jsonl"
    if corpus.exists():
        return folder
    scifact = load_dataset("scifact")
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("queries.jsonl", "qrels"):
        link = folder / name
        if not link.exists():
            link.symlink_to((scifact.path / name).resolve())
    pool = sentence_pool()
    rng = np.random.default_rng(seed)
    with atomic_open(corpus, "w") as f:
        for docid, doc in scifact.corpus.items():
            f.write(json.dumps({"_id": docid, "title": doc.title, "text": doc.text}) + "\n")
        for i in range(max(0, size - len(scifact.corpus))):
            picks = rng.integers(0, len(pool), rng.integers(3, 8))
            f.write(json.dumps({"_id": f"pad{i}", "title": "", "text": " ".join(pool[j] for j in picks)}) + "\n")
    return folder


# ------------------------------------------------------------------------------------------- steps
class MemorySampler:
    """Peaks of this process's anonymous memory (Java heap, Python objects) and file-backed memory
    (mapped index segments, which the kernel may drop at will), from ``/proc/self/status`` every
    0.1 s: the peak RSS alone cannot tell the two apart."""

    def __init__(self):
        import threading

        self.peak = {"RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in self.peak:
                self.peak[key] = max(self.peak[key], int(value.split()[0]))  # kB

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._sample()

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def step_build(folder: Path, flavor: str) -> dict:
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index

    import resource

    with MemorySampler() as memory:
        dataset = load_dataset(str(folder))
        start = time.perf_counter()
        ensure_index(dataset, flavor, force=True)
        seconds = time.perf_counter() - start
    # The wp build's tokenizer worker processes (large corpora) are this step's children, not in its own RSS.
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {f"build_s_{flavor}": seconds, f"docs_per_s_{flavor}": len(dataset.corpus) / seconds,
            f"build_worker_peak_rss_mb_{flavor}": workers, f"build_peak_anon_mb_{flavor}": memory.peak["RssAnon"] / 1024,
            f"build_peak_file_mb_{flavor}": memory.peak["RssFile"] / 1024}


def step_train(folder: Path, steps: int) -> dict:
    import random

    import torch

    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index
    from bm25aug.train.arguments import TrainConfig
    from bm25aug.train.trainer import Trainer

    torch.set_num_threads(2)
    dataset = load_dataset(str(folder))
    config = TrainConfig.for_dataset("scifact", output_dir=tempfile.mkdtemp(prefix="scale-train-"))
    index = ensure_index(dataset, config.target)
    start = time.perf_counter()
    trainer = Trainer(config, dataset, index)
    setup = time.perf_counter() - start
    rng = random.Random(0)
    batches = [trainer.examples[i * config.batch_size:(i + 1) * config.batch_size] for i in range(steps + 1)]
    trainer.training_step(batches[0], rng)  # warm-up
    start = time.perf_counter()
    for batch in batches[1:]:
        trainer.training_step(batch, rng)
    return {"train_setup_s": setup, "step_s": (time.perf_counter() - start) / steps,
            "train_rows_read": trainer.corpora[0].bm25.rows_read}


def step_search(folder: Path, checkpoint: Path) -> dict:
    import torch

    from bm25aug.data.registry import load_dataset
    from bm25aug.eval.evaluate import METHODS, EvalConfig, run_method

    torch.set_num_threads(1)
    dataset = load_dataset(str(folder))
    split = dataset.split("test")
    config = EvalConfig(dataset=str(folder), checkpoint=str(checkpoint))
    # A fresh JVM runs Lucene's code interpreted at first, so the first path searched would carry
    # the JIT's warm-up (eval's 10 warm-up queries are not enough): one pass of bm25-flat, unmeasured.
    run_method(METHODS["bm25-flat"], config, dataset, split, 1000, checkpoint)
    out = {}
    for name in ("bm25-flat", "bm25-wp", "augmented"):
        metrics, _ = run_method(METHODS[name], config, dataset, split, 1000, checkpoint)
        key = name.replace("-", "_")
        out[f"p50_ms_{key}"] = metrics["latency_ms_p50"]
        out[f"ndcg@10_{key}"] = metrics["ndcg@10"]
    return out


def run_step(step: str, folder: Path, args) -> dict:
    """``step`` in a child process; its own peak RSS (MB) comes back with its numbers."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        result = Path(f.name)
    cmd = [sys.executable, __file__, "--step", step, "--folder", str(folder), "--result", str(result),
           "--checkpoint", str(args.checkpoint), "--train-steps", str(args.train_steps)]
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"step {step} on {folder} failed (exit status {status})")
    values = json.loads(result.read_text())
    result.unlink()
    return {**values, "peak_rss_mb": usage.ru_maxrss / 1024}


def measure(size: int, args) -> dict:
    folder = padded_corpus(size)
    row: dict = {"size": size}
    if "build" in args.steps:
        rss = []
        for flavor in ("flat", "wp"):
            values = run_step(f"build-{flavor}", folder, args)
            rss.append(values.pop("peak_rss_mb"))
            row.update(values)
        row["build_peak_rss_mb"] = max(rss)
        for kind in ("anon", "file"):
            row[f"build_peak_{kind}_mb"] = max(row[f"build_peak_{kind}_mb_{f}"] for f in ("flat", "wp"))
    for step in ("train", "search"):
        if step in args.steps:
            values = run_step(step, folder, args)
            row[f"{step}_peak_rss_mb"] = values.pop("peak_rss_mb")
            row.update(values)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--checkpoint", help="the augmented model (trained on SciFact; default checkpoints/scifact/best)")
    p.add_argument("--train-steps", type=int, default=5, help="timed training steps per size")
    p.add_argument("--json-out", help="one JSON object per size, in a list")
    p.add_argument("--record", help="write the run where docs/speed.md's Scale table is generated from "
                                    "(docs/data/scale.json), with this command")
    p.add_argument("--steps", nargs="+", choices=("build", "train", "search"), default=["build", "train", "search"],
                   help="which steps to run at each size (the table and --record need all three)")
    p.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    full = set(args.steps) == {"build", "train", "search"}
    if args.record and not full:
        p.error("--record writes the Scale table, which needs every step; fix: drop --steps")
    from bm25aug.errors import UserError
    from bm25aug.eval.checkpoints import resolve_checkpoint

    try:
        args.checkpoint = resolve_checkpoint(args.checkpoint, "scifact", False)
    except UserError as e:  # one line, as the CLI prints it
        raise SystemExit(f"error: {e}") from None
    if args.step:
        from bm25aug.progress import quiet_libraries

        quiet_libraries()
        folder = Path(args.folder)
        if args.step.startswith("build-"):
            values = step_build(folder, args.step.split("-")[1])
        elif args.step == "train":
            values = step_train(folder, args.train_steps)
        else:
            values = step_search(folder, args.checkpoint)
        Path(args.result).write_text(json.dumps(values))
        return
    try:
        rows = [measure(size, args) for size in args.sizes]
    except UserError as e:  # e.g. no ../shared/data: one line, as the CLI prints it
        raise SystemExit(f"error: {e}") from None
    print(("\n" + scale_table(rows) + "\n" if full else "") + "\n" + extrapolate(rows))
    from bm25aug.io import write_json

    if args.json_out:
        write_json(args.json_out, rows)
    if args.record:
        write_json(args.record, {"command": "python " + " ".join(sys.argv), "rows": rows})


if __name__ == "__main__":
    main()
