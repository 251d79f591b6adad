"""``bm25aug search``: an index (a folder, a Pyserini prebuilt name or a cluster's URL:
``bm25aug.search.indexes.locate_index``), one query or a file of queries, hits printed or written
as a TREC run.

Query files are what Pyserini and BEIR users have: TSV (``qid<TAB>text``, Pyserini's topics) or
JSONL (BEIR's ``queries.jsonl``: ``_id`` and ``text``).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.io import read_lines
from bm25aug.outputs import check_outputs
from bm25aug.search.indexes import local_folder, locate_index
from bm25aug.search.trec import array_lines, write_trec_arrays

log = logging.getLogger(__name__)


def read_queries(path: str | Path) -> dict[str, str]:
    """Queries by id from a TSV (``qid<TAB>text``) or JSONL (``_id``, ``text``) file."""
    from bm25aug.data.corpus import beir_row
    from bm25aug.data.layouts import keep_first
    from bm25aug.limits import ID_RULE, check_text, run_id_ok

    path = Path(path)
    rows = []
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        if path.suffix.lower() == ".jsonl":
            qid, text = beir_row(line, where, ("text",))
        else:
            qid, tab, text = line.rstrip("\r\n").partition("\t")
            if not tab:
                raise UserError(f"{where}: expected 'qid<TAB>query text'; fix: repair that line, or use a .jsonl "
                                f"file of {{\"_id\": ..., \"text\": ...}} objects")
            if not rows and is_header(qid, text):
                log.warning("%s: line %d (%r) is a header, not a query; skipped", path, lineno, line.strip())
                continue
        if not run_id_ok(qid):
            raise UserError(f"{where}: query id {qid!r} {ID_RULE}")
        rows.append((qid, text))
    queries = keep_first(((q, check_text(t, f"{path}: query {q}")) for q, t in rows), path, "query")
    if not queries:
        raise UserError(f"{path} holds no queries; fix: add 'qid<TAB>query text' lines")
    if empty := [q for q, t in queries.items() if not t.strip()]:
        log.warning("%s: %d queries have no text (e.g. %s); they have no hits", path, len(empty), empty[0])
    return queries


# First-line column names that mark a TSV header (BEIR's qrels style, pandas' to_csv, MS MARCO tools).
HEADER_IDS = {"qid", "query_id", "query-id", "queryid", "id", "_id", "topic", "topic_id"}
HEADER_TEXTS = {"text", "query", "query_text", "question", "title", "query text", "topic"}


def is_header(qid: str, text: str) -> bool:
    """Whether a TSV's first line names its columns (``qid<TAB>text``) rather than holding a query."""
    return qid.strip().lower() in HEADER_IDS and text.split("\t")[0].strip().lower() in HEADER_TEXTS


def make_searcher(index: Path | str, model: str | None, tokenizer: str | None, k1: float, b: float, runtime: str,
                  encode_batch_size: int | None = None, hybrid=None):
    """``AugmentedSearcher`` with a model, else ``BM25Searcher`` (wp when a tokenizer is named);
    ``hybrid``: ``(dense model, Fusion)``, the one or the other fused with the dense peer."""
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    if hybrid:
        from bm25aug.search.hybrid import HybridSearcher

        options = {"runtime": runtime, "encode_batch_size": encode_batch_size} if model else {}
        return HybridSearcher.from_pretrained(model, index, hybrid[0], hybrid[1], k1, b, **options)
    if model:
        return AugmentedSearcher.from_pretrained(model, index, k1, b, runtime=runtime, encode_batch_size=encode_batch_size)
    return BM25Searcher(index, k1, b, tokenizer=tokenizer)


def print_hits(hits, out=None) -> None:
    """One line a hit, as Pyserini's examples print them: rank, docid, score."""
    out = out or sys.stdout
    for rank, hit in enumerate(hits, 1):
        out.write(f"{rank:4} {hit.docid} {hit.score:.5f}\n")


def run(args) -> None:
    """``bm25aug search``: check the outputs, search, print the hits or write the run."""
    terms = getattr(args, "terms", None)
    if args.output and not (args.queries or terms):
        raise UserError("--output writes the run of --queries or --terms; fix: pass one of them, or drop --output to "
                        "print the hits of --query")
    if args.tokenizer and args.model:
        raise UserError("--tokenizer is for plain BM25 on a stock wp index; a --model brings its own; fix: drop one")
    if terms and args.model:
        raise UserError("--terms are term lists a model already wrote (bm25aug export); fix: drop --model")
    hybrid = hybrid_of(args)
    if hybrid and (terms or args.tokenizer):
        raise UserError(f"--hybrid fuses queries searched on a flat index with the dense peer; "
                        f"{'--terms' if terms else '--tokenizer'} is not; fix: drop one")
    index = locate_index(args.index)
    check_outputs({"--output": args.output}, {"--index": local_folder(index), "--model": args.model,
                                              "--queries": args.queries, "--terms": terms})
    if terms:
        from bm25aug.search.term_lists import read_term_lists

        from bm25aug.search.augmented import AUGMENTED_FIELD_WEIGHTS

        lists = read_term_lists(terms)
        searcher = make_searcher(index, None, args.tokenizer, args.k1, args.b, args.runtime)
        qids = list(lists)
        # a model's term lists, searched as AugmentedSearcher searches them (on a multifield index, its field weights)
        fields = AUGMENTED_FIELD_WEIGHTS if searcher.meta.flavor == "multifield" else None
        tops = searcher.batch_search_terms_arrays(list(lists.values()), k=args.k or 1000, threads=args.threads,
                                                  desc="search", fields=fields)
        return _write(args, qids, tops, searcher)
    queries = read_queries(args.queries) if args.queries else None
    searcher = make_searcher(index, args.model, args.tokenizer, args.k1, args.b, args.runtime, args.encode_batch_size,
                             hybrid)
    if queries is None:
        print_hits(searcher.search(args.query, args.k or 10))
        return
    qids = list(queries)
    tops = searcher.batch_search_arrays(list(queries.values()), k=args.k or 1000, threads=args.threads, desc="search")
    _write(args, qids, tops, searcher)


def hybrid_of(args):
    """``(dense model, Fusion)`` with ``--hybrid``, else None; a fusion flag without it is refused."""
    given = {"--dense-model": args.dense_model, "--fusion": args.fusion, "--fusion-weight": args.fusion_weight,
             "--fusion-depth": args.fusion_depth}
    if not args.hybrid:
        if flag := next((f for f, v in given.items() if v is not None), None):
            raise UserError(f"{flag} sets up a hybrid search; fix: add --hybrid, or drop {flag}")
        return None
    from bm25aug.search.hybrid import Fusion

    return args.dense_model, Fusion.given(args.fusion, args.fusion_weight, args.fusion_depth)


def _write(args, qids: list[str], tops, searcher) -> None:
    """The run, to ``--output`` or standard output."""
    if args.output:
        write_trec_arrays(qids, tops, searcher.docids, args.output, tag="bm25aug")
        print(f"wrote {sum(len(t.scores) for t in tops)} hits of {len(qids)} queries to {args.output}")
    else:
        sys.stdout.writelines(array_lines(qids, tops, searcher.docids))
