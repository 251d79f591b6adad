"""``bm25aug`` command line: index, train, eval, export. ``train.py``/``eval.py`` call into here."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from bm25aug.errors import UserError

log = logging.getLogger("bm25aug")
METHODS = ("augmented", "bm25-wp", "bm25-flat")
# Relative to the working directory unless set, like Pyserini's indexes/ and runs/.
CHECKPOINT_ROOT = Path(os.environ.get("BM25AUG_CHECKPOINT_ROOT", "checkpoints"))


def _setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("jnius", "urllib3", "httpx", "filelock", "matplotlib", "transformers", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="folder holding <dataset>/ (default: $BM25AUG_DATA_DIR, ~/.cache/bm25aug/datasets)")
    p.add_argument("--index-root", default=None,
                   help="where indexes live (default: $BM25AUG_INDEX_ROOT, else indexes/ in the working directory)")
    p.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))


# ---------------------------------------------------------------------------------------- index
def cmd_index(args) -> None:
    from bm25aug.data import load_dataset
    from bm25aug.index import ensure_index

    dataset = load_dataset(args.dataset, args.data_dir)
    for flavor in args.flavor:
        path = ensure_index(dataset, flavor, args.index_root, threads=args.threads, force=args.force)
        print(f"{flavor}: {path}")


# ---------------------------------------------------------------------------------------- train
def cmd_train(args) -> None:
    import torch

    from bm25aug.data import load_dataset
    from bm25aug.index import ensure_index
    from bm25aug.training import TrainConfig, Trainer

    torch.set_num_threads(args.threads)
    dataset = load_dataset(args.dataset, args.data_dir)
    overrides = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)}
    overrides.update(use_weights=not args.no_weights, use_augmentation=not args.no_augmentation,
                     output_dir=args.output_dir or str(CHECKPOINT_ROOT / dataset.name))
    config = TrainConfig.for_dataset(dataset.name, **{k: v for k, v in overrides.items() if k != "dataset"})
    wp = ensure_index(dataset, "wp", args.index_root, threads=args.threads)
    result = Trainer(config, dataset, wp, resume=args.resume).train()
    reference = result["history"][0]  # epoch 0: plain BM25 wp on the dev queries
    print(f"best dev {reference['dev_metric_name']}: {result['best_dev_metric']:.4f} "
          f"(BM25 wp on the same dev queries: {reference['dev_metric']:.4f}); model: {config.output_dir}/best")


# ----------------------------------------------------------------------------------------- eval
def resolve_checkpoint(path: str | None, dataset_name: str, transfer: bool) -> Path:
    """``--checkpoint`` (a model dir or a train.py output dir), else ``checkpoints/<source>/best``."""
    from bm25aug.data import REGISTRY
    from bm25aug.model import CONFIG_NAME

    if path:
        p = Path(path)
        p = p / "best" if (p / "best").is_dir() else p
        if not (p / CONFIG_NAME).exists():
            raise UserError(f"{p} is not a bm25aug checkpoint (no {CONFIG_NAME}); fix: pass the directory "
                            f"written by `python train.py` (e.g. checkpoints/<dataset>/best)")
        return p
    source = (REGISTRY[dataset_name].transfer_source if transfer and dataset_name in REGISTRY else dataset_name)
    if source is None:
        raise UserError(f"{dataset_name} has no default transfer source; fix: pass --checkpoint DIR")
    default = CHECKPOINT_ROOT / source / "best"
    if not default.is_dir():
        raise UserError(f"no trained model at {default}; fix: run `python train.py --dataset {source}` "
                        f"or pass --checkpoint DIR")
    return default


def timed_run(search, queries: dict[str, str], warmup: int = 10) -> tuple[dict, np.ndarray]:
    """Search query by query on one thread, timing each (model inference included). ``search``
    is a searcher's array path (``search_arrays``): what Lucene and the model cost, not the
    building of Python hit objects."""
    from bm25aug.progress import progress

    for q in list(queries.values())[:warmup]:
        search(q)
    run, latencies = {}, []
    for qid, q in progress(queries.items(), desc="search", unit="q", leave=False):
        start = time.perf_counter()
        run[qid] = search(q)
        latencies.append(time.perf_counter() - start)
    return run, np.asarray(latencies) * 1000


def evaluate_method(method: str, dataset, split, k: int, index_root, threads: int, checkpoint: Path | None,
                    k1: float = 0.9, b: float = 0.4, runtime: str = "onnx-int8") -> tuple[dict, dict]:
    from bm25aug.evaluation import evaluate_split
    from bm25aug.index import ensure_index
    from bm25aug.search import AugmentedSearcher, BM25Searcher, mean_added_terms

    index = ensure_index(dataset, "flat" if method == "bm25-flat" else "wp", index_root, threads=threads)
    extra = {}
    if method == "augmented":
        searcher = AugmentedSearcher.from_pretrained(checkpoint, index, k1, b, runtime=runtime)
        texts = list(split.queries.values())
        terms = searcher.term_lists(texts)
        extra = {"aug_terms_mean": mean_added_terms(searcher.searcher, texts, terms),
                 "query_terms_mean": float(np.mean([len(v) for v in terms])) if terms else 0.0}
    else:
        searcher = BM25Searcher(index, k1, b)
    tops, lat = timed_run(lambda q: searcher.search_arrays(q, k), split.queries)
    run = {qid: searcher.hits(top) for qid, top in tops.items()}
    metrics = evaluate_split(run, split, dataset.corpus)
    metrics.update(latency_ms_p50=float(np.percentile(lat, 50)), latency_ms_p95=float(np.percentile(lat, 95)), **extra)
    return metrics, run


def format_table(results: dict[str, dict]) -> str:
    keys = [k for k in ("ndcg@10", "recall@100", "recall_cap@100", "mrr@10", "map", "acc@1", "acc@5", "acc@20",
                        "acc@100", "latency_ms_p50", "latency_ms_p95", "aug_terms_mean")
            if any(k in m for m in results.values())]
    header = f"{'method':<12}" + "".join(f"{k:>15}" for k in keys)
    rows = [header, "-" * len(header)]
    for method, m in results.items():
        rows.append(f"{method:<12}" + "".join(f"{m[k]:>15.4f}" if k in m else f"{'-':>15}" for k in keys))
    return "\n".join(rows)


def cmd_eval(args) -> None:
    import torch

    from bm25aug.data import load_dataset
    from bm25aug.io import check_output_path, write_json
    from bm25aug.search import read_trec_run, write_trec_run

    torch.set_num_threads(1)  # latency is per query, single thread, model included
    name = args.transfer or args.dataset
    if not name:
        raise UserError("no dataset; fix: pass --dataset NAME (or --transfer NAME)")
    for option, path in (("--output", args.output), ("--json-out", args.json_out)):
        if path:
            check_output_path(path, option)
    dataset = load_dataset(name, args.data_dir)
    split = dataset.split(args.split or dataset.spec.eval_split)
    if args.run:
        from bm25aug.evaluation import evaluate_split

        metrics = evaluate_split(read_trec_run(args.run), split, dataset.corpus)
        print(format_table({Path(args.run).name: metrics}))
        if args.json_out:
            write_json(args.json_out, metrics)
        return
    method = args.method or ("augmented" if (args.checkpoint or args.transfer) else "bm25-wp")
    checkpoint = resolve_checkpoint(args.checkpoint, dataset.name, bool(args.transfer)) if method == "augmented" else None
    methods = METHODS if method == "augmented" else (method,)
    k = args.k or (100 if dataset.is_qa else 1000)
    results, runs = {}, {}
    for m in methods:
        log.info("evaluating %s on %s/%s (%d queries)", m, dataset.name, args.split or dataset.spec.eval_split, len(split.queries))
        results[m], runs[m] = evaluate_method(m, dataset, split, k, args.index_root, args.threads, checkpoint,
                                              args.k1, args.b, args.runtime)
    print(format_table(results))
    try:
        if args.output:
            write_trec_run(runs[method], args.output, tag=method)
    finally:  # the metrics are written even when the run file cannot be
        _write_metrics(args, results, method, dataset, checkpoint)


def _write_metrics(args, results: dict[str, dict], method: str, dataset, checkpoint: Path | None) -> None:
    from bm25aug.io import write_json

    if args.json_out:
        out = dict(results[method], method=method, dataset=dataset.name, checkpoint=str(checkpoint) if checkpoint else None)
        if method == "augmented":
            wp = results["bm25-wp"]
            main_metric = "acc@5" if "acc@5" in wp else "ndcg@10"
            flat = results["bm25-flat"]
            out.update({"latency_ms_p50_bm25_wp": wp["latency_ms_p50"], f"{main_metric}_bm25_wp": wp[main_metric],
                        "latency_ms_p50_bm25_flat": flat["latency_ms_p50"], f"{main_metric}_bm25_flat": flat[main_metric]})
        write_json(args.json_out, out)


# --------------------------------------------------------------------------------------- export
def cmd_export(args) -> None:
    from bm25aug.data import load_dataset
    from bm25aug.export import export_term_lists
    from bm25aug.fast_encoder import load_encoder
    from bm25aug.io import check_output_path

    check_output_path(args.output, "--output")
    dataset = load_dataset(args.dataset, args.data_dir)
    split = dataset.split(args.split or dataset.spec.eval_split)
    model = load_encoder(resolve_checkpoint(args.checkpoint, dataset.name, False), args.runtime)
    n = export_term_lists(model, split.queries, args.output, top_k=args.top_k, threshold=args.threshold)
    print(f"wrote {n} weighted term lists to {args.output}")


# ----------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bm25aug", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("index", help="build Lucene indexes of a dataset")
    p.add_argument("--dataset", required=True)
    p.add_argument("--flavor", nargs="+", default=["flat", "wp"], choices=["flat", "wp"])
    p.add_argument("--force", action="store_true",
                   help="rebuild even if up to date, replacing whatever folder is at the index path")
    _data_args(p)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("train", help="train a query augmenter (see train.py)")
    p.add_argument("--dataset", required=True)
    p.add_argument("--output-dir", help="default: checkpoints/<dataset>")
    p.add_argument("--encoder", help="HF model name or path (default: distilbert-base-uncased, else offline MiniLM)")
    for name, typ in (("epochs", int), ("batch_size", int), ("lr", float), ("head_lr", float), ("lam", float),
                      ("hard_negatives", int), ("negative_depth", int), ("seed", int), ("dev_size", int)):
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=typ, help="default: the dataset's preset")
    p.add_argument("--uniform-l1", action="store_true", help="ablation: uniform L1 instead of sqrt(df/N)")
    p.add_argument("--no-weights", action="store_true", help="ablation: no per-token weights w")
    p.add_argument("--no-augmentation", action="store_true", help="ablation: a ≡ 0 (reweighting only)")
    p.add_argument("--bag-of-words", action="store_true", help="ablation: train with bag-of-words scoring")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    _data_args(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="evaluate a method (see eval.py) or score a run file")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--dataset")
    g.add_argument("--transfer", help="zero-shot: evaluate on this dataset a model trained elsewhere")
    p.add_argument("--method", choices=METHODS)
    p.add_argument("--checkpoint")
    p.add_argument("--split")
    p.add_argument("--k", type=int, help="hits per query (default 1000; 100 for QA)")
    p.add_argument("--k1", type=float, default=0.9, help="BM25 k1 (default 0.9)")
    p.add_argument("--b", type=float, default=0.4, help="BM25 b (default 0.4)")
    p.add_argument("--runtime", default="onnx-int8", choices=["onnx-int8", "torch-int8", "torch-fp32"],
                   help="query encoder runtime for augmented (default: onnx-int8; torch-fp32 is the reference)")
    p.add_argument("--run", help="score this TREC run file instead of searching")
    p.add_argument("--output", help="write the run of --method as a TREC run file")
    p.add_argument("--json-out", help="write the metrics as one JSON object")
    _data_args(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("export", help="write augmented queries as weighted term lists (JSONL)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--split")
    p.add_argument("--output", required=True)
    p.add_argument("--top-k", type=int, help="keep only the k heaviest terms per query")
    p.add_argument("--threshold", type=float, default=0.0, help="drop terms with weight <= this")
    p.add_argument("--runtime", default="onnx-int8", choices=["onnx-int8", "torch-int8", "torch-fp32"],
                   help="query encoder runtime (default: onnx-int8, as AugmentedSearcher; torch-fp32 is the reference)")
    _data_args(p)
    p.set_defaults(func=cmd_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    _setup_logging()
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # e.g. a disk that fills up while writing
        print(f"error: {e.strerror or e} ({e.filename or 'no file name'}); fix: check that path: free space, "
              f"permissions", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun with the same command (train: add --resume) to continue", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
