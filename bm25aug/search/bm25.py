"""BM25 search over ``flat``, ``multifield`` and ``wp`` indexes, Pyserini-style, with hits as numpy arrays or as ``Hit`` lists.

WordPiece queries are weighted term lists turned into a ``BooleanQuery`` of boosted
``TermQuery`` clauses, never through an analyzer: Pyserini's ``get_term_query`` would stem the
term and split ``##`` pieces. A term repeated n times gets boost n, which is what BM25 over a bag
of query tokens means. A multifield index is searched as Pyserini's bm25-multifield searches it:
the English analyzer's terms, boosted by count, on ``contents`` and on ``title``, each field's
clauses boosted by its weight (``MULTIFIELD_WEIGHTS``, 1 and 1). Lucene itself is reached
through ``bm25aug.lucene.reader``.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

from bm25aug.limits import check_query
from bm25aug.ranking import EMPTY, TopK
from bm25aug.backend import ANALYZED
from bm25aug.bm25_defaults import B, FIELD, K1
from bm25aug.search.batch import search_chunks
from bm25aug.search.hits import Hit, Searches, to_hits
from bm25aug.search.indexes import field_weights, open_index
from bm25aug.search.term_lists import check_terms
from bm25aug.tokenization import query_term_counts

log = logging.getLogger(__name__)


class BM25Searcher(Searches):
    """BM25 over a bm25aug index of any flavor (``K1``, ``B`` by default, as Pyserini's BEIR runs), or
    over a flat index on an OpenSearch cluster when ``index_dir`` is its URL: ``bm25aug.search.indexes.open_index``
    opens either.

    Hits, scores and their order equal Pyserini's ``LuceneSearcher`` (see ``bm25aug.lucene.reader``;
    on a multifield index, its ``search(..., fields={"contents": 1.0, "title": 1.0})``).

    A stock index built by Pyserini or Anserini (no bm25aug ``meta.json``) is searched as what its
    fields say: ``multifield`` when it has a title field, else ``flat``, or ``wp`` when
    ``tokenizer`` (a name, a path or a tokenizer) says which WordPiece vocabulary built it. ``flavor``
    names what the caller expects; an index that is something else is refused
    (``bm25aug.lucene.flavors``), as are impact and dense indexes. ``fields``: the field weights of
    a multifield index (default ``MULTIFIELD_WEIGHTS``, Pyserini's)."""

    def __init__(self, index_dir: str | Path, k1: float = K1, b: float = B, tokenizer=None,
                 flavor: str | None = None, fields: dict[str, float] | None = None):
        self.index, self.meta, self.tokenizer, self.index_dir = open_index(index_dir, k1, b, tokenizer, flavor, fields)
        self.k1, self.b = k1, b

    def verify(self, dataset) -> None:
        """That the index holds ``dataset``'s very corpus (``Index.verify``)."""
        self.index.verify(dataset)

    @property
    def num_docs(self) -> int:
        return self.index.num_docs

    @property
    def docids(self) -> np.ndarray:
        """External id of every Lucene doc number."""
        return self.index.docids

    @property
    def fields(self) -> dict[str, float] | None:
        """The field weights of a multifield index (None: ``contents`` alone)."""
        return self.index.fields

    def field_weights(self, fields: dict[str, float] | None) -> dict[str, float] | None:
        """``fields`` checked for this index: weights of a multifield index's two fields (None: this
        searcher's own); any for a one-field index is an error, never ignored."""
        return self.fields if fields is None else self._checked(fields)

    def _checked(self, fields: dict[str, float] | None) -> dict[str, float] | None:
        return field_weights(self.meta, fields, self.index_dir)

    def query_terms(self, query: str) -> dict[str, float]:
        """The index's terms of ``query`` with their counts as weights: WordPiece tokens (``wp``),
        or the English analyzer's terms (``flat`` and ``multifield``, the terms Pyserini's
        bm25-flat and bm25-multifield queries count)."""
        if self.tokenizer is None:
            from bm25aug.lucene.analysis import analyze

            return {t: float(c) for t, c in Counter(analyze(check_query(query))).items()}
        return {t: float(c) for t, c in query_term_counts(self.tokenizer, check_query(query)).items()}

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        """The fast path: Lucene doc numbers and scores as arrays (``hits`` turns them into ``Hit``s)."""
        if not check_query(query).strip():
            return EMPTY
        if self.tokenizer is None:  # Pyserini's own query (multifield: on each field), built in Java
            return self.index.search(self.index.analyzed_query(query), k)
        return self.search_terms_arrays(self.query_terms(query), k)

    def search_terms_arrays(self, terms: dict[str, float], k: int = 1000,
                            fields: dict[str, float] | None = None) -> TopK:
        """Search a weighted term list ``{token: boost}``; an empty list has no hits. ``fields``:
        other field weights of a multifield index for this search (``field_weights``)."""
        query = self.index.weighted_query(check_terms(terms), self.field_weights(fields))
        return EMPTY if query is None else self.index.search(query, k)

    def indexed(self, terms: dict[str, float]) -> dict[str, float]:
        """``terms`` less those the index lacks (in every searched field): a model may propose a
        word no document has, and such a term matches nothing (a no-op in Lucene) but would count
        as an added term."""
        freqs = [self.index.doc_freqs(terms, f) for f in self.fields or (FIELD,)]  # uncached ones asked at once
        if len(freqs) == 1:
            return {t: w for t, w in terms.items() if freqs[0][t]}
        return {t: w for t, w in terms.items() if any(df[t] for df in freqs)}

    def hits(self, top: TopK) -> list[Hit]:
        return to_hits(self.index.docids, top)

    def search_terms(self, terms: dict[str, float], k: int = 1000, fields: dict[str, float] | None = None) -> list[Hit]:
        return self.hits(self.search_terms_arrays(terms, k, fields))

    def query_item(self, query: str) -> str | list | None:
        """What the Java pool searches for ``query`` (``bm25aug.lucene.batch``): the text itself for
        the English analyzer (flat), else its terms with their counts as a term list's element (wp;
        multifield: on each field); None: no terms."""
        if not check_query(query).strip():
            return None
        return query if self.kind == ANALYZED else self.terms_element(self.query_terms(query))

    @property
    def kind(self) -> str:
        """The kind of item ``query_item`` gives the Java pool (``bm25aug.lucene.reader``)."""
        return ANALYZED if self.tokenizer is None and not self.fields else self.index.terms_kind()

    def terms_element(self, terms: dict[str, float], fields: dict[str, float] | None = None) -> list | None:
        """A weighted term list, checked, as the Java pool's element on this index's fields
        (``fields``: other weights, checked by the caller); None: nothing to search."""
        return self.index.terms_element(check_terms(terms), fields)

    def batch_search_arrays(self, queries: Sequence[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]:
        """The fast path for many queries: each one's top k as arrays, searched on ``threads``
        Java threads (``bm25aug.search.batch``); equal to ``search_arrays`` one by one."""
        return search_chunks(self.index, self.kind, lambda chunk: [self.query_item(q) for q in chunk], list(queries),
                             k, threads, desc)

    def batch_search_terms_arrays(self, term_lists: Sequence[dict[str, float]], k: int = 1000, threads: int = 1,
                                  desc: str | None = None, fields: dict[str, float] | None = None) -> list[TopK]:
        """``search_terms_arrays`` for many weighted term lists, on the Java pool."""
        fields = self.field_weights(fields)
        return search_chunks(self.index, self.index.terms_kind(fields),
                             lambda chunk: [self.terms_element(t, fields) for t in chunk], list(term_lists), k, threads, desc)



def mean_added_terms(searcher: BM25Searcher, queries: list[str], term_lists: list[dict[str, float]]) -> float:
    """Average number of terms per query that are not among the query's own WordPiece terms."""
    added = [len(terms.keys() - searcher.query_terms(q).keys()) for q, terms in zip(queries, term_lists)]
    return float(sum(added) / len(added)) if added else 0.0
