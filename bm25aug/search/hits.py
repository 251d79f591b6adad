"""What every searcher answers: ``Hit``s, Pyserini's ``search`` and ``batch_search``.

Each searcher (BM25, augmented, RM3 and Rocchio, the dense and SPLADE peers, hybrid) says how it
ranks, as arrays (``search_arrays``, ``batch_search_arrays``), and how its Lucene doc numbers read
as external ids (``hits``). ``Searches`` gives them all the same ``search`` and ``batch_search``
on top of that, so no searcher lacks one and none answers them differently; ``Searcher`` is the
whole interface, as a protocol.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np

from bm25aug.ranking import TopK
from bm25aug.search.batch import check_qids


class Hit(NamedTuple):
    """One retrieved document, like Pyserini's ``JScoredDoc`` (``docid``, ``score``)."""

    docid: str
    score: float


def to_hits(docids: np.ndarray, top: TopK) -> list[Hit]:
    """Hits of ``top`` with external ids from an index's id table (``bm25aug.lucene.reader.read_docids``)."""
    return list(map(Hit, docids[top.lucene_ids].tolist(), top.scores.tolist()))


@runtime_checkable
class Searcher(Protocol):
    """A query's top k as arrays or as hits, one query or many (``threads``: the searcher's own
    parallelism; any number gives the same ranking)."""

    def search_arrays(self, query: str, k: int = 1000) -> TopK: ...

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]: ...

    def hits(self, top: TopK) -> list[Hit]: ...

    def search(self, query: str, k: int = 1000) -> list[Hit]: ...

    def batch_search(self, queries: list[str], qids: list[str], k: int = 1000, threads: int = 1) -> dict[str, list[Hit]]: ...


class Searches:
    """``search`` and ``batch_search`` from a searcher's ``search_arrays``, ``batch_search_arrays``
    and ``hits``."""

    def search(self, query: str, k: int = 1000) -> list[Hit]:
        """Pyserini's ``search``: the top ``k`` hits of one query, best first."""
        return self.hits(self.search_arrays(query, k))

    def batch_search(self, queries: Sequence[str], qids: Sequence[str], k: int = 1000,
                     threads: int = 1) -> dict[str, list[Hit]]:
        """Pyserini's ``batch_search``: ``{qid: hits}`` (``batch_search_arrays`` without ``Hit``s is faster)."""
        check_qids(queries, qids)
        return dict(zip(qids, map(self.hits, self.batch_search_arrays(list(queries), k, threads))))
