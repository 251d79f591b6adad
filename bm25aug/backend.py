"""What every index does, whatever holds it: the ``Index`` protocol, below both backends.

A Lucene folder (``bm25aug.lucene.reader.LuceneIndex``) and an OpenSearch index
(``bm25aug.opensearch.index.OpenSearchIndex``) implement it; a third backend plugs in by
implementing it too, and ``bm25aug.search.indexes.open_index`` learning its location. Everything
above (``BM25Searcher``, batch search, eval, the server) calls only these. What only a Lucene
folder can do (Lucene's raw, unrounded hits, doc numbers in id order, the folder itself: feedback,
training and torch BM25 read them) is ``LuceneIndex``'s own, and a caller that needs it checks
``isinstance(index, LuceneIndex)``.

The kinds of item a batch search takes (``submit``): a query text for Anserini's bag of words
(``ANALYZED``), or a weighted term list's element (``terms_element``) on ``contents`` alone
(``TERMS``) or on each of several fields (``FIELD_TERMS``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from bm25aug.ranking import TopK

ANALYZED, TERMS, FIELD_TERMS = "analyzed", "terms", "field-terms"


class PendingSearch(Protocol):
    """A batch search under way (``Index.submit``)."""

    def result(self) -> list[TopK]: ...

    def cancel(self) -> None: ...


@runtime_checkable
class Index(Protocol):
    """An open BM25 index: searched with term lists or query texts, ranked as Anserini ranks
    (``bm25aug.ranking``). ``path``: how messages name it (a folder, or a URL without its
    credentials); ``fields``: the field weights every query searches (None: ``contents`` alone);
    ``docids``: the external id of each doc number a ``TopK`` of this index holds."""

    path: object
    num_docs: int
    fields: dict[str, float] | None
    docids: np.ndarray

    def doc_freq(self, term: str, field: str = ...) -> int: ...

    def doc_freqs(self, terms, field: str = ...) -> dict[str, int]: ...

    def doc_numbers(self, ids: list[str]) -> np.ndarray: ...

    def stored(self, numbers: list[int]) -> list[str | None]: ...

    def analyzed_query(self, text: str): ...

    def weighted_query(self, terms: dict[str, float], fields: dict[str, float] | None = None): ...

    def terms_element(self, terms: dict[str, float], fields: dict[str, float] | None = None) -> list | None: ...

    def terms_kind(self, fields: dict[str, float] | None = None) -> str: ...

    def query(self, kind: str, item): ...

    def depth(self, k: int) -> int: ...

    def search(self, query, k: int) -> TopK: ...

    def submit(self, kind: str, texts: list, k: int, threads: int) -> PendingSearch: ...

    def verify(self, dataset) -> None: ...

    def close(self) -> None: ...
