"""``bm25aug train`` and ``train.py``: the config from the command line, the indexes, the run, one summary line."""

from __future__ import annotations

import time

import torch

from bm25aug import recipes
from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.eval.checkpoints import CHECKPOINT_ROOT
from bm25aug.lucene.index import ensure_index
from bm25aug.train.arguments import from_args
from bm25aug.train.corpora import run_name
from bm25aug.train.trainer import Trainer


def run(args) -> None:
    names = args.dataset or (recipes.datasets(args.recipe) if args.recipe else [])
    if not names:
        raise UserError("no training data; fix: pass --dataset NAME [NAME ...], or a --recipe that names its "
                        f"datasets ({', '.join(r for r in recipes.names() if recipes.datasets(r))})")
    datasets = [load_dataset(name, args.data_dir) for name in names]
    # A run over a recipe's own datasets is named after the recipe (checkpoints/general).
    name = args.recipe if not args.dataset else run_name(datasets)
    config = from_args(args, name, CHECKPOINT_ROOT)
    torch.set_num_threads(config.threads)
    indexes = [ensure_index(d, config.target, args.index_root, threads=config.threads) for d in datasets]
    start = time.perf_counter()
    result = Trainer(config, datasets, indexes, resume=args.resume).train()
    reference = result["history"][0]  # epoch 0: plain BM25 on the target's index, same dev queries
    selection = result["selection"]
    plain = (f"; no significant gain over BM25 (one-sided p = {selection['p_value']:.2g}), so the model is "
             f"plain BM25 (w = 1, a = 0)" if selection and not selection["kept"] else "")
    print(f"best dev {reference['dev_metric_name']}: {result['best_dev_metric']:.4f} "
          f"(BM25 {config.target} on the same dev queries: {reference['dev_metric']:.4f}){plain}; "
          f"model: {config.output_dir}/best ({time.perf_counter() - start:.0f} s)")
