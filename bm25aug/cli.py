"""``bm25aug`` command line: index, train, eval, export, search. ``train.py``/``eval.py`` call into here."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import fields
from pathlib import Path


from bm25aug.errors import UserError
from bm25aug.experiment import CHECKPOINT_ROOT, METHODS
from bm25aug.limits import RUNTIMES

log = logging.getLogger("bm25aug")



def _setup_logging() -> None:
    """Our own progress at INFO; every other library (onnxruntime's quantizer logs each tensor on the
    root logger, jnius, transformers, ...) only at WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("bm25aug").setLevel(logging.INFO)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="folder holding <dataset>/ (default: $BM25AUG_DATA_DIR, ~/.cache/bm25aug/datasets)")
    p.add_argument("--index-root", default=None,
                   help="where indexes live (default: $BM25AUG_INDEX_ROOT, else indexes/ in the working directory)")
    p.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))


# ---------------------------------------------------------------------------------------- index
def cmd_index(args) -> None:
    from bm25aug.data import load_dataset
    from bm25aug.index import ensure_index, index_size

    dataset = load_dataset(args.dataset, args.data_dir)
    for flavor in args.flavor:
        path = ensure_index(dataset, flavor, args.index_root, threads=args.threads, force=args.force)
        size = index_size(path)
        vectors = f", of which document vectors {size['docvectors'] / 1e6:.1f} MB" if size["docvectors"] else ""
        print(f"{flavor}: {path} ({size['total'] / 1e6:.1f} MB{vectors})")


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
    index = ensure_index(dataset, config.target, args.index_root, threads=args.threads)
    start = time.perf_counter()
    result = Trainer(config, dataset, index, resume=args.resume).train()
    reference = result["history"][0]  # epoch 0: plain BM25 on the target's index, same dev queries
    selection = result["selection"]
    plain = (f"; no significant gain over BM25 (one-sided p = {selection['p_value']:.2g}), so the model is "
             f"plain BM25 (w = 1, a = 0)" if selection and not selection["kept"] else "")
    print(f"best dev {reference['dev_metric_name']}: {result['best_dev_metric']:.4f} "
          f"(BM25 {config.target} on the same dev queries: {reference['dev_metric']:.4f}){plain}; "
          f"model: {config.output_dir}/best ({time.perf_counter() - start:.0f} s)")


# ----------------------------------------------------------------------------------------- eval
def cmd_eval(args) -> None:
    from bm25aug.experiment import EvalConfig, evaluate, format_table, inputs, score_run
    from bm25aug.io import check_outputs, write_json
    from bm25aug.search import write_trec_run

    name = args.transfer or args.dataset
    if not name:
        raise UserError("no dataset; fix: pass --dataset NAME (or --transfer NAME)")
    method = args.method or ("augmented" if (args.checkpoint or args.transfer) else "bm25-wp")
    config = EvalConfig(dataset=name, method=method, split=args.split, checkpoint=args.checkpoint,
                        transfer=bool(args.transfer), k=args.k, k1=args.k1, b=args.b, runtime=args.runtime,
                        index_root=args.index_root, data_dir=args.data_dir, threads=args.threads,
                        index=args.index, tokenizer=args.tokenizer, remove_query=args.remove_query,
                        companions=args.companions, aug_gate=args.aug_gate)
    check_outputs({"--output": args.output, "--json-out": args.json_out}, inputs(config, args.run))
    if args.run:
        if args.output:
            raise UserError("--output writes the run of a search, and --run scores a run without searching; "
                            "fix: drop --output (--json-out writes the metrics)")
        metrics = score_run(config, args.run)
        print(format_table({Path(args.run).name: metrics}))
        if args.json_out:
            write_json(args.json_out, metrics)
        return
    result = evaluate(config)
    print(result.table())
    try:
        if args.output:
            write_trec_run(result.runs[method], args.output, tag=method)
    finally:  # the metrics are written even when the run file cannot be
        if args.json_out:
            write_json(args.json_out, result.summary())


# --------------------------------------------------------------------------------------- export
def cmd_export(args) -> None:
    from bm25aug.data import load_dataset
    from bm25aug.experiment import resolve_checkpoint
    from bm25aug.export import export_term_lists
    from bm25aug.fast_encoder import load_encoder
    from bm25aug.io import check_outputs

    dataset = load_dataset(args.dataset, args.data_dir)
    checkpoint = resolve_checkpoint(args.checkpoint, dataset.name, False)
    check_outputs({"--output": args.output}, {"the dataset": dataset.path, "--checkpoint": args.checkpoint,
                                              "the model": checkpoint})
    split = dataset.split(dataset.spec.eval_split if args.split is None else args.split)
    model = load_encoder(checkpoint, args.runtime)
    n = export_term_lists(model, split.queries, args.output, top_k=args.top_k, threshold=args.threshold)
    print(f"wrote {n} weighted term lists to {args.output}")


# --------------------------------------------------------------------------------------- search
def cmd_search(args) -> None:
    from bm25aug.batch import make_searcher, print_hits, read_queries, resolve_index
    from bm25aug.io import check_outputs
    from bm25aug.search import trec_lines, write_trec_run

    if args.output and not args.queries:
        raise UserError("--output writes the run of --queries; fix: pass --queries FILE, or drop --output to print "
                        "the hits of --query")
    if args.tokenizer and args.model:
        raise UserError("--tokenizer is for plain BM25 on a stock wp index; a --model brings its own; fix: drop one")
    index = resolve_index(args.index)
    check_outputs({"--output": args.output}, {"--index": index, "--model": args.model, "--queries": args.queries})
    queries = read_queries(args.queries) if args.queries else None
    searcher = make_searcher(index, args.model, args.tokenizer, args.k1, args.b, args.runtime)
    if queries is None:
        print_hits(searcher.search(args.query, args.k or 10))
        return
    run = searcher.batch_search(list(queries.values()), list(queries), k=args.k or 1000, threads=args.threads)
    if args.output:
        write_trec_run(run, args.output, tag="bm25aug")
        print(f"wrote {sum(map(len, run.values()))} hits of {len(run)} queries to {args.output}")
    else:
        sys.stdout.writelines(trec_lines(run))


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
                      ("hard_negatives", int), ("random_negatives", int), ("negative_depth", int), ("seed", int),
                      ("dev_size", int), ("weight_floor", float), ("penalty_floor", float)):
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=typ, help="default: the dataset's preset")
    p.add_argument("--off-positive-penalty", type=float, help="L1 penalty at least this for a(q) entries whose term "
                                                              "is in none of the query's relevant documents (default 0)")
    p.add_argument("--ema-decay", type=float, help="dev checks and best/ use this moving average of the weights "
                                                   "(per step; default 0.99, 0: off)")
    p.add_argument("--flops", type=float, help="weight of SPLADE's FLOPS regularizer on a(q) (default 0.1, 0: off)")
    p.add_argument("--significance", type=float, help="best/ must beat plain BM25 on dev at this one-sided p level, "
                                                      "else it is plain BM25 (default 0.05, 0: off)")
    p.add_argument("--aug-threshold", type=float, help="zero a(q) entries at or below this, in training and search "
                                                       "alike (learned pruning; default 0)")
    p.add_argument("--encoder-layers", type=int, help="keep only the encoder's first N layers (a cheaper query "
                                                      "encoder; 0: the embeddings alone; default: all)")
    p.add_argument("--aug-layer", type=int, help="the encoder layer a(q) is pooled from: 0 (the token embeddings) "
                                                 "to N, or -1 (the last, as the paper); w always reads the last")
    p.add_argument("--aug-init", choices=["embeddings", "centered", "random"],
                   help="the a(q) head's start: the word-embedding matrix (default), the same with each word's "
                        "bias lowered by its logit at the training queries' mean vector (centered), or random")
    p.add_argument("--teacher", help="a trained model (train.py output dir) whose scores over each batch this one "
                                     "also learns to match (distillation; same target and vocabulary)")
    p.add_argument("--distill-weight", type=float, help="weight of the distillation term (default 1; needs --teacher)")
    p.add_argument("--gate-quantile", type=float, help="after training, use a(q) only for queries with at most this "
                                                       "quantile of the training queries' non-zero counts (0: no gate)")
    p.add_argument("--pseudo-queries", type=int, help="add N pseudo-queries cut from the corpus (one sentence each, "
                                                      "the rest of its document the positive) to the training "
                                                      "queries; default 0")
    p.add_argument("--target", choices=["wp", "flat"],
                   help="the index the model serves: wp (WordPiece, the paper's) or flat (Lucene's English "
                        "analyzer, Pyserini's stock BEIR/MS MARCO indexes); default: the dataset's preset")
    p.add_argument("--pooling", choices=["cls", "mean", "max"],
                   help="a(q) from the [CLS] state, the mean state, or SPLADE-style max over tokens "
                        "(default: the encoder's pretraining pooling)")
    p.add_argument("--negatives", choices=["bm25", "dpr"],
                   help="hard negatives: mined from our own index with BM25 (default, as the paper) or DPR's "
                        "hard_negative_ctxs from the training JSON")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"],
                   help="auto (default): CUDA when torch sees a GPU, else CPU; cuda trains with bf16 autocast")
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
    p.add_argument("--method", choices=sorted(METHODS))
    p.add_argument("--checkpoint")
    p.add_argument("--split")
    p.add_argument("--k", type=int, help="hits per query (default 1000; 100 for QA)")
    p.add_argument("--k1", type=float, default=0.9, help="BM25 k1 (default 0.9)")
    p.add_argument("--b", type=float, default=0.4, help="BM25 b (default 0.4)")
    p.add_argument("--runtime", default="onnx-int8", choices=RUNTIMES,
                   help="query encoder runtime for augmented (default: onnx-int8; torch-fp32 is the reference)")
    p.add_argument("--index", help="search this Lucene index with --method (a stock Pyserini/Anserini index too: "
                                   "flat as it is, wp with --tokenizer) instead of the dataset's own")
    p.add_argument("--tokenizer", help="the WordPiece tokenizer a stock wp --index was built with (e.g. bert-base-uncased)")
    p.add_argument("--remove-query", action=argparse.BooleanOptionalAction, default=None,
                   help="drop hits whose docid is the query id before scoring, as Pyserini's BEIR regressions "
                        "(default: on for arguana and quora, off elsewhere)")
    p.add_argument("--aug-gate", type=int, help="override the checkpoint's augmentation gate: a(q) only for "
                                                "queries with at most N non-zero entries (0: off)")
    p.add_argument("--no-companions", dest="companions", action="store_false",
                   help="run only --method (augmented otherwise brings bm25-flat, bm25-wp, bm25-rm3, bm25-rocchio)")
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
    p.add_argument("--runtime", default="onnx-int8", choices=RUNTIMES,
                   help="query encoder runtime (default: onnx-int8, as AugmentedSearcher; torch-fp32 is the reference)")
    _data_args(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("search", help="search an index: one query, or a file of queries to a TREC run")
    p.add_argument("--index", required=True, help="an index folder (bm25aug's, or a stock Pyserini/Anserini one), or "
                                                  "a Pyserini prebuilt index name (e.g. beir-v1.0.0-scifact.flat)")
    p.add_argument("--model", help="a bm25aug model folder: augmented search (default: plain BM25)")
    p.add_argument("--tokenizer", help="plain BM25 on a stock WordPiece index: the tokenizer that built it")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--query", help="one query: its hits are printed (rank, docid, score)")
    g.add_argument("--queries", help="a file of queries: TSV (qid<TAB>text) or JSONL (_id, text)")
    p.add_argument("--output", help="with --queries: the TREC run file to write (default: standard output)")
    p.add_argument("--k", type=int, help="hits per query (default: 10 for --query, 1000 for --queries)")
    p.add_argument("--k1", type=float, default=0.9, help="BM25 k1 (default 0.9)")
    p.add_argument("--b", type=float, default=0.4, help="BM25 b (default 0.4)")
    p.add_argument("--runtime", default="onnx-int8", choices=RUNTIMES,
                   help="the model's query encoder runtime (default: onnx-int8)")
    p.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1), help="search threads for --queries")
    p.set_defaults(func=cmd_search)
    return parser


def main(argv: list[str] | None = None) -> int:
    from bm25aug.interrupts import install
    from bm25aug.limits import check_all

    _setup_logging()
    install()  # SIGTERM, as Ctrl-C, unwinds through cleanup (bm25aug.interrupts)
    args = build_parser().parse_args(argv)
    if args.command != "index":
        from bm25aug.progress import quiet_libraries

        quiet_libraries()
    try:
        check_all(args)
        args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # e.g. a disk that fills up while writing
        print(f"error: {e.strerror or e} ({e.filename or 'no file name'}); fix: check that path: free space, "
              f"permissions", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        again = ("rerun with --resume to continue after the last finished epoch" if args.command == "train"
                 else "rerun the same command")
        print(f"interrupted; temporaries removed; {again}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
