"""Where a training step's time goes: the parts of ``Trainer.training_step`` timed over N steps.

    python research/profile_training.py --dataset nfcorpus squad --recipe general --steps 40 [--json-out F]

It sets a run up as ``train.py`` does (into a scratch folder), then times each part of N steps
(query batch: tokenization and Lucene analysis; the encoder's forward pass; boosts; the documents'
rows; torch BM25; the loss; backward; the optimizer) and one dev evaluation, and prints each
part's share. It changes nothing in the run it measures; the folder is deleted at the end.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", nargs="+", required=True)
    p.add_argument("--recipe")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--query-side", default="contextual", choices=("contextual", "static"))
    p.add_argument("--json-out", help="write the shares as JSON (docs/data/profile_training.json feeds docs/training.md)")
    args = p.parse_args()

    import torch

    from bm25aug.cli import setup_logging
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index
    from bm25aug.train.arguments import TrainConfig
    from bm25aug.train.torch_bm25 import TorchBM25
    from bm25aug.train.trainer import Trainer

    setup_logging()
    if args.threads:
        torch.set_num_threads(args.threads)
    scratch = Path(tempfile.mkdtemp(prefix="profile_training."))
    try:
        from bm25aug import recipes

        settings = recipes.settings(args.recipe) if args.recipe else {}
        config = TrainConfig(dataset="+".join(args.dataset), output_dir=str(scratch / "run"), query_side=args.query_side,
                             **settings)
        datasets = [load_dataset(d) for d in args.dataset]
        indexes = [ensure_index(d, config.target) for d in datasets]
        trainer = Trainer(config, datasets, indexes)
        spent: dict[str, float] = defaultdict(float)

        @contextmanager
        def timed(name: str):
            start = time.perf_counter()
            yield
            spent[name] += time.perf_counter() - start

        def wrap(owner, attr: str, name: str) -> None:
            original = getattr(owner, attr)

            def timed_call(*a, **k):
                with timed(name):
                    return original(*a, **k)

            setattr(owner, attr, timed_call)

        wrap(trainer.target, "batch", "query batch (tokenize, analyze)")
        wrap(trainer.target, "boosts", "boosts (w, a -> index columns)")
        wrap(TorchBM25, "doc_matrix", "document rows (sparse f(d))")
        if args.query_side == "contextual":
            wrap(trainer.model, "forward", "encoder forward")
        else:
            wrap(trainer.model, "column_boosts", "boosts (w, a -> index columns)")
        wrap(trainer, "batch_rows", "draw documents")
        for c in trainer.corpora:
            wrap(c, "loss", "loss")
        original_backward = torch.Tensor.backward

        def backward(self, *a, **k):
            with timed("backward"):
                return original_backward(self, *a, **k)

        torch.Tensor.backward = backward
        wrap(trainer.optimizer, "step", "optimizer step")
        rng = random.Random(0)
        batches = [b for b in __import__("bm25aug.train.corpora", fromlist=["epoch_batches"]).epoch_batches(
            trainer.corpora, config.batch_size, config.corpus_temperature, rng)][:args.steps]
        trainer.training_step(batches[0], rng)  # warm-up (first-touch row reads, allocator)
        spent.clear()
        trainer.model.train()
        start = time.perf_counter()
        for batch in batches[1:]:
            trainer.training_step(batch, rng)
        total = time.perf_counter() - start
        torch.Tensor.backward = original_backward
        steps = len(batches) - 1
        print(f"{steps} steps, {total / steps * 1000:.0f} ms a step ({config.batch_size} queries, "
              f"{config.random_negatives} random negatives), torch threads {torch.get_num_threads()}")
        parts = dict(spent)  # the steps' own, before the dev evaluation (which runs the model too)
        other = total - sum(parts.values())
        for name, s in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<36} {s / steps * 1000:7.1f} ms  {s / total:6.1%}")
        print(f"  {'(rest: masks, sums, scheduler)':<36} {max(other, 0) / steps * 1000:7.1f} ms")
        spent.clear()
        with timed("dev"):
            trainer.evaluate_dev()
        dev_queries = sum(len(c.dev.queries) for c in trainer.corpora)
        print(f"one dev evaluation: {spent['dev']:.1f} s ({dev_queries} queries), "
              f"= {spent['dev'] / (total / steps):.0f} steps")
        if args.json_out:
            from bm25aug.io import write_json

            write_json(args.json_out, {
                "command": " ".join(["python", *sys.argv]), "steps": steps, "ms_a_step": total / steps * 1000,
                "batch_size": config.batch_size, "random_negatives": config.random_negatives,
                "torch_threads": torch.get_num_threads(), "parts_ms": {k: v / steps * 1000 for k, v in parts.items()},
                "rest_ms": max(other, 0) / steps * 1000,
                "dev_s": spent["dev"], "dev_queries": dev_queries, "query_side": args.query_side})
        trainer.release()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
