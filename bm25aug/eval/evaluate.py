"""One place that runs an evaluation: ``eval.py``, ``bm25aug.reproduce.conditions`` and Python users call it.

The methods are the entries of ``bm25aug.eval.methods.METHODS``; this module runs one (and its
companions) on a dataset split and scores it.

    from bm25aug.eval.evaluate import EvalConfig, evaluate
    result = evaluate(EvalConfig(dataset="scifact", method="bm25-flat"))
    print(result.table()); result.metrics["bm25-flat"]["ndcg@10"]
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from bm25aug.errors import UserError
from bm25aug.eval.checkpoints import CHECKPOINT_DEV, checkpoint_dev, described, plain_bm25, resolve_checkpoint
from bm25aug.bm25_defaults import B, K1
from bm25aug.eval.methods import METHODS, Method, index_flavor
from bm25aug.limits import RUNTIMES, check_all, check_choice

log = logging.getLogger(__name__)


@dataclass
class EvalConfig:
    """What to evaluate; the defaults are Pyserini's BEIR settings."""

    dataset: str
    method: str = "bm25-wp"
    split: str | None = None  # default: the dataset's evaluation split
    checkpoint: str | None = None  # augmented: a model dir or a train.py output dir
    transfer: bool = False  # zero-shot: without a checkpoint, use the dataset's default source model
    k: int | None = None  # hits per query (default 1000; 100 for QA)
    k1: float = K1
    b: float = B
    runtime: str = "onnx-int8"  # the query encoder's runtime (augmented)
    encode_batch_size: int | None = None  # queries a forward pass (augmented; see encode_queries)
    aug_gate: int | None = None  # override the checkpoint's augmentation gate (0: off)
    index_root: str | None = None
    data_dir: str | None = None
    threads: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))  # index builds, batch search
    index: str | None = None  # search this index (a stock Pyserini/Anserini one too) instead of building one
    tokenizer: str | None = None  # the WordPiece tokenizer a stock wp ``index`` was built with
    remove_query: bool | None = None  # drop hits whose docid is the query id; None: the dataset's default
    companions: bool = True  # run the method's companions (baselines) beside it
    # a multifield index's field weights, for the asked-for method (default: Pyserini's, MULTIFIELD_WEIGHTS)
    fields: dict[str, float] | None = None
    dense_model: str | None = None  # the dense peer of dense and hybrid (None: bm25aug.dense.DEFAULT_DENSE_MODEL)
    # hybrid's fusion (bm25aug.search.hybrid.Fusion); None: its default
    fusion: str | None = None
    fusion_weight: float | None = None
    fusion_depth: int | None = None

    def __post_init__(self) -> None:
        check_all(self)
        for name, allowed in (("transfer", (bool,)), ("companions", (bool,)), ("remove_query", (bool, type(None)))):
            if not isinstance(getattr(self, name), allowed):
                raise UserError(f"{name} must be true or false, not {getattr(self, name)!r}; fix: pass a bool")
        check_choice("query encoder runtime", self.runtime, RUNTIMES)


@dataclass
class EvalResult:
    """Metrics and runs per method (the asked-for method first), and where they came from."""

    config: EvalConfig
    dataset: str
    split: str
    method: str
    checkpoint: Path | None
    metrics: dict[str, dict]
    runs: dict[str, dict]
    remove_query: bool = False  # hits whose docid is the query id were dropped before scoring

    def table(self) -> str:
        """The metrics, then the model each model's row used (and whether it ranked as plain BM25)."""
        lines = [format_table(self.metrics)]
        if any(m.get("ran_on") == "cluster" for m in self.metrics.values()):  # say where each row ran
            lines += [f"{name}: ran {m['ran_on']}, on {m['index']}" + ("" if m["ran_on"] == "cluster" else
                      " (it reads what only an index folder holds)") for name, m in self.metrics.items()]
        lines += [f"{name}: fused by {m['fusion']} with {m['dense_model']}" for name, m in self.metrics.items()
                  if "fusion" in m]
        for name, m in self.metrics.items():
            if name in METHODS and METHODS[name].needs_checkpoint and self.checkpoint:
                plain = "; its term lists are the queries' own terms: this row is plain BM25"
                lines.append(f"{name}: {described(self.checkpoint)}{plain if m.get('plain_bm25') else ''}")
        return "\n".join(lines)

    def summary(self) -> dict:
        """The asked-for method's metrics, the companions' p50 and main metric beside them, and
        every method's full metrics under ``methods`` (``--json-out``)."""
        out = dict(self.metrics[self.method], method=self.method, dataset=self.dataset, split=self.split,
                   checkpoint=str(self.checkpoint) if self.checkpoint else None, remove_query=self.remove_query)
        main_metric = "acc@5" if "acc@5" in out else "ndcg@10"
        for name in [m for m in METHODS[self.method].companions if m in self.metrics]:
            key = name.replace("-", "_")
            out.update({f"latency_ms_p50_{key}": self.metrics[name]["latency_ms_p50"],
                        f"{main_metric}_{key}": self.metrics[name][main_metric]})
        out["methods"] = self.metrics
        return out


LATENCY_QUERIES = 100  # queries timed one at a time for p50/p95 (the run itself is one batch)


def latency_ms(search, queries: list[str], warmup: int = 10) -> np.ndarray:
    """Milliseconds per query, searched one at a time on one thread (model inference included),
    over the first ``LATENCY_QUERIES`` queries. ``search`` is a searcher's array path
    (``search_arrays``): what Lucene and the model cost, not the building of Python hit objects."""
    for q in queries[:warmup]:
        search(q)
    latencies = []
    for q in queries[:LATENCY_QUERIES]:
        start = time.perf_counter()
        search(q)
        latencies.append(time.perf_counter() - start)
    return np.asarray(latencies) * 1000


def run_method(method: Method, config: EvalConfig, dataset, split, k: int, checkpoint: Path | None,
               remove_query: bool = False, index: Path | None = None) -> tuple[dict, dict]:
    """Metrics (quality, p50/p95 latency; for augmented, added terms and their precision) and the
    run of one method. ``index``: search it instead of the dataset's own (built when missing)."""
    from bm25aug.eval.metrics import evaluate_split
    from bm25aug.lucene.index import ensure_index
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.dense import DenseSearcher, ExactSearcher
    from bm25aug.search.hybrid import HybridSearcher
    from bm25aug.search.indexes import local_folder

    given = index is not None
    index = index or ensure_index(dataset, index_flavor(method, checkpoint), config.index_root, threads=config.threads)
    cluster = local_folder(index) is None  # an OpenSearch index (bm25aug.opensearch)
    if cluster and not method.any_index:
        raise UserError(f"{method.name} reads what only an index folder holds (document vectors, stored contents "
                        f"or a WordPiece field); on a cluster's index run {' or '.join(n for n, m in METHODS.items() if m.any_index)}; fix: pass "
                        f"the dataset's index folder as --index, or drop it")
    searcher = method.searcher(index, config, checkpoint)
    if "torch" in sys.modules:  # a model's method loaded it: latency is per query on one thread, model included
        import torch

        torch.set_num_threads(1)
    if given:
        searcher.verify(dataset)  # the index given holds the dataset's very corpus (Index.verify)
    qids, texts = list(split.queries), list(split.queries.values())
    lat = latency_ms(lambda q: searcher.search_arrays(q, k), texts)
    model = searcher.sparse if isinstance(searcher, HybridSearcher) else searcher  # whose term lists are described
    start = time.perf_counter()
    if isinstance(model, AugmentedSearcher):  # encoded once: searched, and described below
        terms = model.term_lists(texts, config.threads)
        tops = searcher.batch_search_terms_arrays(terms, k, config.threads, desc="search") if model is searcher else \
            searcher.batch_search_arrays(texts, k, config.threads, desc="search", term_lists=terms)
    else:
        tops = searcher.batch_search_arrays(texts, k, config.threads, desc="search")
    qps = len(texts) / max(time.perf_counter() - start, 1e-9)
    extra = {}
    if isinstance(searcher, HybridSearcher):  # the fusion and the dense model, so that a row says what made it
        extra = {"fusion": searcher.fusion.describe(), "dense_model": searcher.dense.model.name}
    if isinstance(searcher, DenseSearcher):  # which dense model (an export: bge-small-en-v1.5-int8) made the row
        extra = {"dense_model": searcher.model.name}
    if isinstance(model, AugmentedSearcher):
        extra.update(model_extras(model, terms, method, checkpoint, qids, split, dataset, index, cluster))
    run = {qid: searcher.hits(top) for qid, top in zip(qids, tops)}
    if remove_query:
        run = drop_query_hits(run)
    metrics = evaluate_split(run, split, dataset.corpus)
    if isinstance(searcher, (ExactSearcher, HybridSearcher)):  # a peer that encoded the corpus first (once, cached)
        extra["corpus_encode_s"] = searcher.encode_seconds
    metrics.update(latency_ms_p50=float(np.percentile(lat, 50)), latency_ms_p95=float(np.percentile(lat, 95)), qps=qps,
                   **extra, ran_on="cluster" if cluster else "in process", index=str(index))
    return metrics, run


def model_extras(searcher, terms: list[dict[str, float]], method: Method, checkpoint: Path | None, qids: list[str],
                 split, dataset, index, cluster: bool) -> dict:
    """What a model's term lists did (``AugmentedSearcher``): added terms, whether it ranked as plain
    BM25 (said, and labelled in the table), and the added terms' precision where it can be read."""
    from bm25aug.eval.metrics import added_term_precision
    from bm25aug.lucene.doc_terms import DocTermReader
    from bm25aug.search.bm25 import mean_added_terms

    texts = [split.queries[q] for q in qids]
    extra = {"aug_terms_mean": mean_added_terms(searcher.bm25, texts, terms),
             "query_terms_mean": float(np.mean([len(v) for v in terms])) if terms else 0.0}
    if plain_bm25(searcher.bm25, texts, terms):  # labelled so in the table, and said here
        extra["plain_bm25"] = True
        log.warning("%s: %s gave every query its own terms (as plain BM25 counts them, up to one factor): the row "
                    "ranks as bm25-%s does, the model changed nothing", method.name, described(checkpoint),
                    searcher.bm25.meta.flavor)
    if searcher.bm25.meta.flavor == "multifield" and not dataset.is_qa:  # it reads one field; flat measures it
        log.info("%s is multifield: the added terms' precision is measured on the flat index", index)
    elif cluster and not dataset.is_qa:
        log.info("%s is on a cluster, whose documents' terms are not read here: the added terms' precision "
                 "is not measured (eval.py on the dataset's flat index folder measures it)", index)
    elif not dataset.is_qa and DocTermReader(searcher.bm25.index, searcher.bm25.meta.flavor == "wp").readable:
        extra.update(added_term_precision(searcher.bm25, dict(zip(qids, terms)), split))
    elif not dataset.is_qa:
        log.info("%s stores no document vectors, so the added terms' precision is not measured (a stock index "
                 "needs none to search)", index)
    return extra


def drop_query_hits(run: dict[str, list]) -> dict[str, list]:
    """The run without hits whose docid is the query id (Anserini's -removeQuery, Pyserini's BEIR
    regressions on ArguAna and Quora), for searched and scored run files alike."""
    return {qid: [h for h in hits if h.docid != qid] for qid, hits in run.items()}


def evaluate(config: EvalConfig) -> EvalResult:
    """Run ``config.method`` (and its companions) on the dataset's split: the run as one batch on
    ``config.threads`` threads, p50/p95 latency one query at a time (``latency_ms``)."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.search.indexes import local_folder, locate_index

    if config.method not in METHODS:
        raise UserError(f"unknown method {config.method!r}; fix: use one of {', '.join(METHODS)}")
    dataset = load_dataset(config.dataset, config.data_dir)
    split_name = dataset.spec.eval_split if config.split is None else config.split
    method = METHODS[config.method]
    if config.fields is not None and method.flavor not in ("multifield", "target"):
        raise UserError(f"field weights are for a multifield index, and {method.name} searches a {method.flavor} one; "
                        f"fix: drop them, or use --method bm25-multifield or augmented-multifield")
    hybrid = method.name in ("hybrid", "augmented-hybrid")
    given = {"--fusion": config.fusion, "--fusion-weight": config.fusion_weight, "--fusion-depth": config.fusion_depth,
             "--dense-model": config.dense_model}
    if flag := next((f for f, v in given.items() if v is not None and not (hybrid or (f == "--dense-model" and
                                                                                   method.name == "dense"))), None):
        why = (f"{flag} is for hybrid search's fusion, and --method dense ranks by the dense peer alone"
               if method.name == "dense" else
               f"{flag} is for the dense peer and hybrid search, and --method {method.name} uses neither")
        raise UserError(f"{why}; fix: drop {flag}, or use --method hybrid or augmented-hybrid")
    checkpoint = resolve_checkpoint(config.checkpoint, dataset.name, config.transfer) if method.needs_checkpoint else None
    split = checkpoint_dev(dataset, checkpoint) if split_name == CHECKPOINT_DEV else dataset.split(split_name)
    k = config.k or (100 if dataset.is_qa else 1000)
    remove_query = dataset.spec.remove_query if config.remove_query is None else config.remove_query
    metrics, runs = {}, {}
    given = locate_index(config.index) if config.index else None
    cluster = given is not None and local_folder(given) is None
    for name in (method.name, *(method.companions if config.companions else ())):
        log.info("evaluating %s on %s/%s (%d queries)", name, dataset.name, split_name, len(split.queries))
        # --index and the field weights are the asked-for method's; companions search the dataset's own
        # index, except that a cluster's index is searched by every method that can search it
        on_given = name == method.name or (cluster and METHODS[name].any_index)
        index = given if given is not None and on_given else None
        metrics[name], runs[name] = run_method(METHODS[name], config if name == method.name else replace(config, fields=None),
                                               dataset, split, k, checkpoint, remove_query, index)
    return EvalResult(config, dataset.name, split_name, method.name, checkpoint, metrics, runs, remove_query)


def score_run(config: EvalConfig, run_file: str | Path) -> dict:
    """Metrics of an existing TREC run file on the dataset's split, scored as a searched run is
    (``remove_query`` included). A run with no hits, or none for the split's queries, is an error:
    it would score 0 as if it had been searched."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.eval.metrics import evaluate_split
    from bm25aug.search.trec import read_trec_run

    dataset = load_dataset(config.dataset, config.data_dir)
    split_name = dataset.spec.eval_split if config.split is None else config.split
    split = dataset.split(split_name)
    run = read_trec_run(run_file)
    if not any(run.values()):
        raise UserError(f"{run_file} holds no hits; fix: pass a TREC run file ('qid Q0 docid rank score tag' lines)")
    if not any(q in split.queries for q in run):
        raise UserError(f"none of the {len(run)} queries of {run_file} is a query of {dataset.name}/{split_name} "
                        f"(e.g. {next(iter(run))!r}); fix: pass the --dataset and --split the run was made for")
    if missing := sum(1 for q in split.queries if not run.get(q)):
        log.warning("%s has no hits for %d of the %d queries of %s/%s; they score 0", run_file, missing,
                    len(split.queries), dataset.name, split_name)
    if dataset.spec.remove_query if config.remove_query is None else config.remove_query:
        run = drop_query_hits(run)
    return evaluate_split(run, split, dataset.corpus)


def inputs(config: EvalConfig, run_file: str | Path | None = None) -> dict[str, Path | None]:
    """What an evaluation reads, which no output may overwrite or write into: the dataset folder,
    the index folders it may search or build, the model and a run file."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import FLAVORS, index_path
    from bm25aug.search.indexes import local_folder, locate_index

    dataset = load_dataset(config.dataset, config.data_dir)
    model = None
    if config.method in METHODS and METHODS[config.method].needs_checkpoint and not run_file:
        try:
            model = resolve_checkpoint(config.checkpoint, dataset.name, config.transfer)
        except UserError:
            pass  # reported when the evaluation asks for it
    index = locate_index(config.index) if config.index else None
    found = {"the dataset": dataset.path, "--index": local_folder(index) if index else None,
             "--checkpoint": Path(config.checkpoint) if config.checkpoint else None, "the model": model,
             "--run": Path(run_file) if run_file else None}
    for flavor in FLAVORS:
        path = index_path(dataset.name, flavor, config.index_root)
        found.update({f"the {flavor} index": path, f"the {flavor} index's lock": path.parent / f".{path.name}.lock"})
    return found


def format_table(results: dict[str, dict]) -> str:
    keys = [k for k in ("ndcg@10", "recall@100", "recall_cap@100", "mrr@10", "map", "acc@1", "acc@5", "acc@20",
                        "acc@100", "latency_ms_p50", "latency_ms_p95", "qps", "aug_terms_mean", "added_precision_weight",
                        "corpus_encode_s")
            if any(k in m for m in results.values())]
    width = {k: max(15, len(k) + 2) for k in keys}
    header = f"{'method':<14}" + "".join(f"{k:>{width[k]}}" for k in keys)
    rows = [header, "-" * len(header)]
    for method, m in results.items():
        rows.append(f"{method:<14}" + "".join(f"{m[k]:>{width[k]}.4f}" if k in m else f"{'-':>{width[k]}}" for k in keys))
    return "\n".join(rows)
