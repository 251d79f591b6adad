"""``bm25aug`` command line: index, train, adapt, eval, search, export, serve, cluster. It parses and dispatches; each
command's work is a library function (``<subpackage>.<module>.run``). ``train.py``/``eval.py``
call into here."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from bm25aug.errors import UserError, os_error_message, silence_stdout, stdout_gone
from bm25aug.limits import RUNTIMES
from bm25aug.bm25_defaults import B, K1

log = logging.getLogger("bm25aug")
# The module whose ``run(args)`` does each command.
COMMANDS = {"index": "bm25aug.search.index_command", "train": "bm25aug.train.command", "eval": "bm25aug.eval.command",
            "search": "bm25aug.search.command", "export": "bm25aug.eval.export_command",
            "serve": "bm25aug.serve.command", "adapt": "bm25aug.adapt.command",
            "cluster": "bm25aug.opensearch.local"}


def setup_logging() -> None:
    """Our own progress at INFO; every other library (onnxruntime's quantizer logs each tensor on the
    root logger, jnius, transformers, ...) only at WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("bm25aug").setLevel(logging.INFO)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _data_args(p: argparse.ArgumentParser, threads: bool = True) -> None:
    p.add_argument("--data-dir", help="folder holding <dataset>/ (default: $BM25AUG_DATA_DIR, ~/.cache/bm25aug/datasets)")
    p.add_argument("--index-root", default=None,
                   help="where indexes live (default: $BM25AUG_INDEX_ROOT, else indexes/ in the working directory)")
    if threads:
        p.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1), help="default: the CPU count")


def _bm25_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k1", type=float, default=K1, help=f"BM25 k1 (default {K1})")
    p.add_argument("--b", type=float, default=B, help=f"BM25 b (default {B})")


def _runtime_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runtime", default=RUNTIMES[0], choices=RUNTIMES,
                   help=f"the query encoder's runtime (default: {RUNTIMES[0]}; torch-fp32 is the reference)")
    p.add_argument("--encode-batch-size", type=int,
                   help="queries a forward pass of the encoder (default: 1 for the int8 runtimes, whose batches "
                        "share activation scales, so every query gets the terms it gets alone; 32 for torch-fp32)")


def _index_parser(sub) -> None:
    from bm25aug.lucene.index import FLAVORS
    from bm25aug.opensearch.schema import REPLICAS, SHARDS

    p = sub.add_parser("index", help="build Lucene indexes of a dataset")
    p.add_argument("--dataset", required=True)
    p.add_argument("--flavor", nargs="+", default=["flat", "wp"], choices=FLAVORS,
                   help="flat and wp (default), or multifield: title and text as separate fields, as Pyserini's")
    p.add_argument("--force", action="store_true",
                   help="rebuild even if up to date, replacing whatever folder is at the index path (with --to: "
                        "replace an index bm25aug made; one it did not make is never deleted)")
    p.add_argument("--to", metavar="URL", help="index into an OpenSearch cluster instead, as the flat index scores: "
                                               "http://HOST:PORT[,HOST:PORT...]/INDEX (docs/scale-out.md)")
    p.add_argument("--shards", type=int, help=f"with --to: shards of the new index (default {SHARDS})")
    p.add_argument("--replicas", type=int, help=f"with --to: copies of each shard on other nodes (default {REPLICAS})")
    _bm25_args(p)
    _data_args(p)


def _cluster_parser(sub) -> None:
    from bm25aug.opensearch.launcher import DEFAULT, ENGINES
    from bm25aug.opensearch.local import HEAP, NODES

    p = sub.add_parser("cluster", help="start, check, stop or delete a local OpenSearch cluster (docs/scale-out.md)")
    p.add_argument("action", choices=("start", "status", "stop", "delete"),
                   help="stop ends the nodes and keeps their data (start brings them back); delete removes it")
    p.add_argument("--nodes", type=int, help=f"with start: nodes, each its own JVM (default {NODES}; a cluster "
                                             f"started before keeps its own)")
    p.add_argument("--heap", help=f"with start: each node's Java heap (default {HEAP}, or the cluster's own)")
    engines = ", ".join(f"{version} (Java {engine.java_text()})" for version, engine in ENGINES.items())
    p.add_argument("--opensearch", metavar="VERSION", help=f"with start: a new cluster's OpenSearch, one of {engines} "
                   f"(default {DEFAULT}; 3.x scores exactly as Lucene); a cluster started before keeps its own")
    p.add_argument("--root", help="the cluster's folder (default: $BM25AUG_CLUSTER_ROOT, else bm25aug's cache)")


def _train_parser(sub) -> None:
    from bm25aug.train.arguments import add_arguments

    p = sub.add_parser("train", help="train a query augmenter (see train.py)")
    p.add_argument("--dataset", nargs="+", help="one dataset, or several to train one model on all of them "
                                                "(default: the datasets --recipe names)")
    add_arguments(p)  # one flag per TrainConfig setting, help from the dataclass
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    _data_args(p, threads=False)


def _adapt_parser(sub) -> None:
    from bm25aug.adapt.command import add_arguments

    p = sub.add_parser("adapt", help="fit the query model to a corpus with no queries and no judgements (docs/adapt.md)")
    add_arguments(p)


def _eval_parser(sub) -> None:
    from bm25aug.eval.evaluate import METHODS

    p = sub.add_parser("eval", help="evaluate a method (see eval.py) or score a run file")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--dataset")
    g.add_argument("--transfer", help="zero-shot: evaluate on this dataset a model trained elsewhere")
    p.add_argument("--method", choices=sorted(METHODS))
    p.add_argument("--checkpoint")
    p.add_argument("--split")
    p.add_argument("--k", type=int, help="hits per query (default 1000; 100 for QA)")
    _bm25_args(p)
    _runtime_arg(p)
    p.add_argument("--index", help="search this Lucene index with --method (a stock Pyserini/Anserini index too: "
                                   "flat as it is, wp with --tokenizer), or an OpenSearch index's URL "
                                   "(docs/scale-out.md), instead of the dataset's own")
    p.add_argument("--tokenizer", help="the WordPiece tokenizer a stock wp --index was built with (e.g. bert-base-uncased)")
    p.add_argument("--fields", nargs="+", metavar="FIELD=WEIGHT",
                   help="a multifield index's field weights, as Pyserini's --fields (e.g. contents=1.0 title=0.25; "
                        "default: Pyserini's 1 and 1 for BM25, contents 1 and title 0.25 for a model)")
    p.add_argument("--remove-query", action=argparse.BooleanOptionalAction, default=None,
                   help="drop hits whose docid is the query id before scoring, as Pyserini's BEIR regressions "
                        "(default: on for arguana and quora, off elsewhere)")
    p.add_argument("--aug-gate", type=int, help="override the checkpoint's augmentation gate: a(q) only for "
                                                "queries with at most N non-zero entries (0: off)")
    p.add_argument("--no-companions", dest="companions", action="store_false",
                   help="run only --method (augmented otherwise brings bm25-flat, bm25-wp, bm25-rm3, bm25-rocchio)")
    p.add_argument("--run", help="score this TREC run file instead of searching")
    _fusion_args(p, "--method dense, hybrid and augmented-hybrid")
    p.add_argument("--output", help="write the run of --method as a TREC run file")
    p.add_argument("--json-out", help="write the metrics as one JSON object")
    _data_args(p)


def _fusion_args(p, what: str) -> None:
    """The dense peer and the fusion of a hybrid (``bm25aug.search.hybrid``)."""
    from bm25aug.dense.models import DEFAULT_DENSE_MODEL
    from bm25aug.search.hybrid import DEFAULT_FUSION, FUSIONS

    p.add_argument("--dense-model", help=f"the dense peer of {what} (default: {DEFAULT_DENSE_MODEL}, the corpus "
                                         "by int8, queries by fp32; bge-small-en-v1.5-fp32, bge-small-en-v1.5-int8, "
                                         "all-MiniLM-L6-v2, a Hub name, a model folder or KIND=FOLDER)")
    p.add_argument("--fusion", choices=FUSIONS, help=f"how a hybrid fuses (default: {DEFAULT_FUSION.method})")
    p.add_argument("--fusion-weight", type=float, help="interpolation: the sparse side's share, 0 to 1 (default: "
                                                       f"{DEFAULT_FUSION.weight:g})")
    p.add_argument("--fusion-depth", type=int, help="hits each side of a hybrid contributes, at least the k asked for "
                                                    f"(default: {DEFAULT_FUSION.depth})")


def _export_parser(sub) -> None:
    p = sub.add_parser("export", help="write augmented queries as weighted term lists (JSONL)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--split")
    p.add_argument("--output", required=True)
    p.add_argument("--top-k", type=int, help="keep only the k heaviest terms per query")
    p.add_argument("--threshold", type=float, default=0.0, help="drop terms with weight <= this")
    _runtime_arg(p)
    _data_args(p)


def _search_parser(sub) -> None:
    p = sub.add_parser("search", help="search an index: one query, or a file of queries to a TREC run")
    p.add_argument("--index", required=True, help="an index folder (bm25aug's, or a stock Pyserini/Anserini one), "
                                                  "a Pyserini prebuilt index name (e.g. beir-v1.0.0-scifact.flat), "
                                                  "or an OpenSearch index's URL (http://HOST:PORT/INDEX)")
    p.add_argument("--model", help="a bm25aug model folder: augmented search (default: plain BM25)")
    p.add_argument("--tokenizer", help="plain BM25 on a stock WordPiece index: the tokenizer that built it")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--query", help="one query: its hits are printed (rank, docid, score)")
    g.add_argument("--queries", help="a file of queries: TSV (qid<TAB>text) or JSONL (_id, text)")
    g.add_argument("--terms", help="a file of weighted term lists, as bm25aug export writes them (JSONL: id, "
                                   "vector {term: weight}): plain BM25 on those weights")
    p.add_argument("--output", help="with --queries or --terms: the TREC run file to write (default: standard output)")
    p.add_argument("--k", type=int, help="hits per query (default: 10 for --query, 1000 for --queries)")
    p.add_argument("--hybrid", action="store_true", help="fuse BM25 (or --model's term lists) with the dense peer, "
                                                         "on a flat index folder")
    _fusion_args(p, "--hybrid")
    _bm25_args(p)
    _runtime_arg(p)
    p.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1), help="search threads for --queries")


def _serve_parser(sub) -> None:
    from bm25aug.search.hybrid import INTERPOLATION_WEIGHT
    from bm25aug.serve.config import ServeConfig
    from bm25aug.serve.mcp_tools import TRANSPORTS

    d = ServeConfig()
    p = sub.add_parser("serve", help="serve indexes over HTTP (Anserini's REST API) or MCP")
    p.add_argument("--index", action="append", help="NAME=PATH: an index folder, Pyserini prebuilt name or "
                                                    "OpenSearch index URL to serve (repeat for more; a bare PATH is "
                                                    "named after its folder)")
    p.add_argument("--model", action="append", help="NAME=PATH: a model folder that rewrites NAME's queries")
    p.add_argument("--dense", action="append", help="NAME=MODEL: a dense model (e.g. bge-small-en-v1.5) that NAME, a "
                                                    "flat index folder, is also searched with: methods dense and hybrid")
    p.add_argument("--config", help="a YAML file of the indexes and settings (docs/usage-serve.md)")
    p.add_argument("--mcp", action="store_true", help="serve MCP tools instead of the REST API")
    p.add_argument("--transport", default=TRANSPORTS[0], choices=TRANSPORTS, help="with --mcp (default: stdio)")
    for flag, kind, what in (("host", str, "address to listen on"), ("port", int, "port to listen on"),
                             ("max-hits", int, "most hits a search may ask for"),
                             ("max-query-chars", int, "longest query accepted"),
                             ("max-batch", int, "queries a micro-batch"),
                             ("max-wait-ms", float, "how long a batch waits for more requests under load"),
                             ("max-queue", int, "waiting requests before 503"),
                             ("workers", int, "batches in flight per index and method"),
                             ("threads", int, "Java search threads a batch"),
                             ("doc-cache", int, "stored documents cached per index"),
                             ("retry-after", int, "seconds a 503 asks clients to wait"),
                             ("shutdown-s", int, "seconds a stop waits for in-flight requests"),
                             ("header-timeout-s", float, "seconds a request (head and body) has to arrive"),
                             ("max-connections", int, "open connections (past it the oldest idle one is closed)"),
                             ("send-timeout-s", float, "seconds an answer may stand unread before its connection is dropped"),
                             ("unread-budget-mb", int, "MB of answers waiting on slow readers, all together"),
                             ("max-terms", int, "terms of one weighted query"),
                             ("max-body-bytes", int, "largest request body"),
                             ("k1", float, "BM25 k1"), ("b", float, "BM25 b"),
                             ("fusion", str, "hybrid's fusion: rrf or interpolation"),
                             ("fusion-depth", int, "hits each side of a hybrid contributes")):
        p.add_argument(f"--{flag}", type=kind, help=f"{what} (default: {getattr(d, flag.replace('-', '_'))})")
    p.add_argument("--fusion-weight", type=float, help=f"hybrid interpolation's sparse share; rrf takes none "
                                                       f"(default: {INTERPOLATION_WEIGHT:g} with interpolation)")
    for flag, what in (("allowed-hosts", "Host header names answered, any port"),
                       ("allowed-origins", "Origin headers answered (browser pages)")):
        p.add_argument(f"--{flag}", nargs="+", metavar="NAME", help=f"{what}; '*' for any, behind a proxy that "
                       f"checks them (default: {' '.join(getattr(d, flag.replace('-', '_')))})")
    p.add_argument("--runtime", choices=RUNTIMES, help=f"the query encoder's runtime (default: {d.runtime})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bm25aug", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_index_parser, _train_parser, _adapt_parser, _eval_parser, _search_parser, _export_parser,
                _serve_parser, _cluster_parser):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from bm25aug.interrupts import install
    from bm25aug.limits import check_all

    setup_logging()
    install()  # SIGTERM, as Ctrl-C, unwinds through cleanup (bm25aug.interrupts)
    args = build_parser().parse_args(argv)
    if args.command != "index":
        from bm25aug.progress import quiet_libraries

        quiet_libraries()
    try:
        check_all(args)
        importlib.import_module(COMMANDS[args.command]).run(args)
        sys.stdout.flush()  # here, so that a reader that left early is a BrokenPipeError below, not at exit
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError as e:
        if not stdout_gone():  # another pipe (a worker process's): an error like any other
            print(f"error: {os_error_message(e)}", file=sys.stderr)
            return 2
        silence_stdout()  # `| head` closed our output: stop quietly, as Unix tools do
        return 141  # 128 + SIGPIPE, what a shell reports for a tool its pipe stopped
    except OSError as e:  # e.g. a disk that fills up while writing
        print(f"error: {os_error_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.command == "serve":  # Ctrl-C or SIGTERM is how a server is stopped
            print("stopped", file=sys.stderr)
            return 0
        again = ("rerun with --resume to continue after the last finished epoch" if args.command in ("train", "adapt")
                 else "rerun the same command")
        print(f"interrupted; temporaries removed; {again}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
