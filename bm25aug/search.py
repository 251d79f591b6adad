"""BM25 search over ``flat`` and ``wp`` indexes, Pyserini-style, plus TREC run files.

WordPiece queries are weighted term lists turned into a ``BooleanQuery`` of boosted
``TermQuery`` clauses, never through an analyzer: Pyserini's ``get_term_query`` would stem the
term and split ``##`` pieces. A term repeated n times gets boost n, which is what BM25 over a bag
of query tokens means. Lucene itself is reached through ``bm25aug.lucene``.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

from bm25aug.errors import UserError
from bm25aug.index import IndexMeta, check_vocab
from bm25aug.io import atomic_write_text, read_lines
from bm25aug.limits import check, check_query, run_id_ok
from bm25aug.lucene import EMPTY, LuceneIndex, TopK
from bm25aug.progress import progress
from bm25aug.tokenization import load_tokenizer, query_term_counts

log = logging.getLogger(__name__)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class Hit(NamedTuple):
    """One retrieved document, like Pyserini's ``JScoredDoc`` (``docid``, ``score``)."""

    docid: str
    score: float


class BM25Searcher:
    """BM25 over a bm25aug index of either flavor (k1=0.9, b=0.4 as in Pyserini's BEIR runs).

    Hits, scores and their order equal Pyserini's ``LuceneSearcher`` (see ``bm25aug.lucene``).

    A stock index built by Pyserini or Anserini (no bm25aug ``meta.json``) is searched as it is:
    as ``flat``, or as ``wp`` when ``tokenizer`` (a name, a path or a tokenizer) says which
    WordPiece vocabulary built it. ``flavor`` forces one of the two for a stock index."""

    def __init__(self, index_dir: str | Path, k1: float = 0.9, b: float = 0.4, tokenizer=None,
                 flavor: str | None = None):
        self.index_dir = Path(index_dir)
        tokenizer = load_tokenizer(tokenizer) if isinstance(tokenizer, (str, Path)) else tokenizer
        self.meta = IndexMeta.load(self.index_dir, tokenizer, flavor)
        if flavor and self.meta.flavor != flavor:  # bm25aug's own index: its meta.json says what it is
            raise UserError(f"{self.index_dir} is a {self.meta.flavor} index, not {flavor}; fix: pass a {flavor} index "
                            f"(`bm25aug index --flavor {flavor}`), or the method or model for {self.meta.flavor}")
        self.index = LuceneIndex(self.index_dir, k1, b)
        self.k1, self.b = k1, b
        self.tokenizer = None
        if self.meta.flavor == "wp":
            self.tokenizer = tokenizer or load_tokenizer()
            check_vocab(self.meta, self.tokenizer, self.index_dir)

    @property
    def num_docs(self) -> int:
        return self.index.num_docs

    @property
    def docids(self) -> np.ndarray:
        """External id of every Lucene doc number."""
        return self.index.docids

    def query_terms(self, query: str) -> dict[str, float]:
        """The index's terms of ``query`` with their counts as weights: WordPiece tokens (``wp``),
        or the English analyzer's terms (``flat``, the terms Pyserini's bm25-flat query counts)."""
        if self.tokenizer is None:
            from bm25aug.analysis import analyze

            return {t: float(c) for t, c in Counter(analyze(check_query(query))).items()}
        return {t: float(c) for t, c in query_term_counts(self.tokenizer, check_query(query)).items()}

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        """The fast path: Lucene doc numbers and scores as arrays (``hits`` turns them into ``Hit``s)."""
        if not check_query(query).strip():
            return EMPTY
        if self.tokenizer is None:
            return self.index.search(self.index.analyzed_query(query), k)
        return self.search_terms_arrays(self.query_terms(query), k)

    def search_terms_arrays(self, terms: dict[str, float], k: int = 1000) -> TopK:
        """Search a weighted term list ``{token: boost}``; an empty list has no hits."""
        check_terms(terms)
        if not any(w > 0 for w in terms.values()):
            return EMPTY
        return self.index.search(self.index.weighted_query(terms), k)

    def indexed(self, terms: dict[str, float]) -> dict[str, float]:
        """``terms`` less those the index lacks: a model may propose a word no document has, and
        such a term matches nothing (a no-op in Lucene) but would count as an added term."""
        return {t: w for t, w in terms.items() if self.index.doc_freq(t)}

    def hits(self, top: TopK) -> list[Hit]:
        return to_hits(self.index.docids, top)

    def search(self, query: str, k: int = 1000) -> list[Hit]:
        return self.hits(self.search_arrays(query, k))

    def search_terms(self, terms: dict[str, float], k: int = 1000) -> list[Hit]:
        return self.hits(self.search_terms_arrays(terms, k))

    def batch_search(self, queries: list[str], qids: list[str], k: int = 1000, threads: int = 1) -> dict[str, list[Hit]]:
        """Search many queries on ``threads`` threads; the result equals searching one by one."""
        return parallel_map(lambda q: self.search(q, k), queries, qids, threads)


def check_terms(terms: dict[str, float]) -> None:
    """A weighted term list as ``search_terms`` takes it: non-empty string terms, finite weights.
    (The common case is decided by one sum; only a list that fails it is looked at term by term.)"""
    if not terms:
        return
    try:
        weights = terms.values()
        if ("" not in terms and math.isfinite(sum(weights)) and 0 <= min(weights) and max(weights) < _FLOAT32_MAX
                and all(type(t) is str for t in terms)):
            return
    except TypeError:
        pass
    for term, weight in terms.items():
        if not isinstance(term, str) or not term:
            raise UserError(f"term {term!r} is not a non-empty string; fix: pass {{term: weight}} with string terms")
        if (isinstance(weight, bool) or not isinstance(weight, (int, float, np.floating)) or not np.isfinite(weight)
                or not 0 <= weight < _FLOAT32_MAX):
            raise UserError(f"the weight of {term!r} is {weight!r}; fix: pass a number from 0 to 3.4e38 (Lucene "
                            f"keeps boosts as 32-bit floats, and a negative one is no boost)")


def to_hits(docids: np.ndarray, top: TopK) -> list[Hit]:
    """Hits of ``top`` with external ids from an index's id table (``bm25aug.lucene.read_docids``)."""
    return list(map(Hit, docids[top.lucene_ids].tolist(), top.scores.tolist()))


def mean_added_terms(searcher: BM25Searcher, queries: list[str], term_lists: list[dict[str, float]]) -> float:
    """Average number of terms per query that are not among the query's own WordPiece terms."""
    added = [len(terms.keys() - searcher.query_terms(q).keys()) for q, terms in zip(queries, term_lists)]
    return float(sum(added) / len(added)) if added else 0.0


def parallel_map(fn, items: list, qids: list[str], threads: int, desc: str | None = None) -> dict[str, list[Hit]]:
    """Apply a search function over queries on ``threads`` threads (``bm25aug.lucene`` makes that
    safe, and Lucene searches without the GIL). ``desc`` names a progress bar, shown on a terminal."""
    if len(items) != len(qids):
        raise UserError(f"got {len(items)} queries but {len(qids)} qids; fix: pass one qid per query")
    if len(set(qids)) != len(qids):
        repeated = next(q for q, n in Counter(qids).items() if n > 1)
        raise UserError(f"qid {repeated!r} is given to more than one query (their runs would overwrite each other); "
                        f"fix: pass one unique qid per query")
    check("threads", threads)
    pool = ThreadPoolExecutor(max_workers=threads)
    try:
        results = list(progress(pool.map(fn, items), total=len(items), desc=desc, unit="q", disable=desc is None))
    except BaseException:  # a Ctrl-C, or a query's error: the queries still queued are dropped, not run
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return dict(zip(qids, results))


def trec_lines(run: dict[str, list[Hit]], tag: str = "bm25aug") -> Iterator[str]:
    """``qid Q0 docid rank score tag`` lines of a run. An id holding whitespace would shift the
    columns: an error, not a file no tool reads right."""
    ids = set(run) | {h.docid for hits in run.values() for h in hits}
    if (bad := next((i for i in ids if not run_id_ok(i)), None)) is not None:
        raise UserError(f"id {bad!r} is empty or holds whitespace, which a TREC run file cannot hold; fix: give "
                        f"that query or document an id without spaces, tabs or newlines")
    return (f"{qid} Q0 {hit.docid} {rank} {hit.score:.6f} {tag}\n"
            for qid, hits in run.items() for rank, hit in enumerate(hits, 1))


def write_trec_run(run: dict[str, list[Hit]], path: str | Path, tag: str = "bm25aug") -> None:
    """A TREC run file (``trec_lines``), written to a temp file and renamed."""
    atomic_write_text(path, "".join(trec_lines(run, tag)))


def read_trec_run(path: str | Path) -> dict[str, list[Hit]]:
    """A TREC run file, hits sorted by score. NaN or infinite scores are an error; a document
    listed twice for a query is kept once (its first line), with a warning and a count."""
    run: dict[str, list[Hit]] = {}
    seen: set[tuple[str, str]] = set()
    repeated = 0
    for lineno, line in read_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 6:
            raise UserError(f"{path}:{lineno}: expected 'qid Q0 docid rank score tag'; fix: repair that line")
        try:
            score = float(parts[4])
        except ValueError:
            raise UserError(f"{path}:{lineno}: score {parts[4]!r} is not a number; fix: repair that line") from None
        if not math.isfinite(score):
            raise UserError(f"{path}:{lineno}: score {parts[4]!r} is not a finite number; fix: repair that line")
        if (parts[0], parts[2]) in seen:
            repeated += 1
            continue
        seen.add((parts[0], parts[2]))
        run.setdefault(parts[0], []).append(Hit(parts[2], score))
    if repeated:
        log.warning("%s: %d lines repeat a document already listed for that query; the first is kept", path, repeated)
    for hits in run.values():
        hits.sort(key=lambda h: -h.score)
    return run


@dataclass
class AugmentedQuery:
    """A query's learned term list next to its plain WordPiece terms, to show what changed."""

    query: str
    terms: dict[str, float]
    original: dict[str, float]

    @property
    def added(self) -> dict[str, float]:
        """Terms the model added (not in the query), heaviest first."""
        return dict(sorted(((t, w) for t, w in self.terms.items() if t not in self.original), key=lambda tw: -tw[1]))

    @property
    def reweighted(self) -> dict[str, tuple[float, float]]:
        """Query terms as ``token: (BM25 boost, learned boost)``; a learned 0 means dropped."""
        return {t: (c, self.terms.get(t, 0.0)) for t, c in self.original.items()}

    def explain(self, top: int = 15) -> str:
        lines = [f"query: {self.query}", "reweighted (bm25 -> learned):"]
        lines += [f"  {t:<20} {c:5.2f} -> {w:6.3f}" for t, (c, w) in self.reweighted.items()]
        added = list(self.added.items())
        lines.append(f"added ({len(added)} terms, top {min(top, len(added))}):")
        lines += [f"  {t:<20} {w:6.3f}" for t, w in added[:top]]
        return "\n".join(lines)


class AugmentedSearcher:
    """BM25 with queries rewritten by a trained ``QueryAugmenter``, over the index of its target
    (``wp``, or ``flat``: Lucene's English analyzer, as Pyserini's prebuilt indexes).

    Documents are never re-encoded: each query becomes boosted term queries on the stock index.
    """

    def __init__(self, model, searcher: BM25Searcher, top_k: int | None = None, threshold: float = 0.0):
        target = model.config.target
        if searcher.meta.flavor != target:
            raise UserError(f"{searcher.index_dir} is a {searcher.meta.flavor} index but the model was trained for "
                            f"{target} indexes; fix: use the dataset's {target} index")
        if target == "wp" and model.config.vocab_hash and model.config.vocab_hash != searcher.meta.vocab_hash:
            raise UserError(f"the checkpoint was trained against vocabulary {model.config.vocab_hash} but "
                            f"{searcher.index_dir} has {searcher.meta.vocab_hash}; fix: use a wp index built "
                            f"with the checkpoint's tokenizer")
        self.model, self.searcher = model, searcher
        self.top_k, self.threshold = check("top_k", top_k), check("threshold", threshold)

    @classmethod
    def from_pretrained(cls, checkpoint: str | Path, index: str | Path, k1: float = 0.9, b: float = 0.4,
                        top_k: int | None = None, threshold: float = 0.0,
                        runtime: str = "onnx-int8", aug_gate: int | None = None) -> "AugmentedSearcher":
        """``runtime`` of the query encoder: ``onnx-int8`` (default, and what ``bm25aug export`` uses), ``torch-int8``
        or ``torch-fp32`` (the reference); see ``bm25aug.fast_encoder``. ``aug_gate`` overrides the
        checkpoint's augmentation gate (0: off; see ``bm25aug.targets``)."""
        from bm25aug.fast_encoder import load_encoder

        model = load_encoder(checkpoint, runtime)
        if aug_gate is not None:
            model.config.aug_gate = check("aug_gate", aug_gate)
        return cls(model, BM25Searcher(index, k1, b, tokenizer=model.tokenizer, flavor=model.config.target),
                   top_k, threshold)

    def term_lists(self, queries: list[str]) -> list[dict[str, float]]:
        """The model's term lists (as ``bm25aug export`` writes them) less the terms this index
        lacks: they match nothing, so the ranking is the same, and ``added`` shows only terms
        that can score."""
        from bm25aug.export import encode_queries

        lists = encode_queries(self.model, queries, top_k=self.top_k, threshold=self.threshold, progress=False)
        return [self.searcher.indexed(terms) for terms in lists]

    def augment(self, query: str) -> AugmentedQuery:
        terms = self.term_lists([query])[0] if check_query(query).strip() else {}
        return AugmentedQuery(query, terms, self.searcher.query_terms(query))

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        if not check_query(query).strip():
            return EMPTY
        return self.searcher.search_terms_arrays(self.term_lists([query])[0], k)

    @property
    def docids(self) -> np.ndarray:
        return self.searcher.docids

    def hits(self, top: TopK) -> list[Hit]:
        return self.searcher.hits(top)

    def search(self, query: str, k: int = 1000) -> list[Hit]:
        return self.hits(self.search_arrays(query, k))

    def batch_search(self, queries: list[str], qids: list[str], k: int = 1000, threads: int = 1) -> dict[str, list[Hit]]:
        """Encode and search each query on ``threads`` threads (the encoder and Lucene both run
        without the GIL); a query is always encoded alone, so the result equals searching one by one."""
        return parallel_map(lambda q: self.search(q, k), queries, qids, threads)
