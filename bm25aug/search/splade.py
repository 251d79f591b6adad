"""The sparse peer: SPLADE (``bm25aug.dense.splade``; SPLADE-tiny by default) with exact dot product
over every document, what re-indexing with a learned sparse encoder buys beside bm25aug (which
re-encodes no document) and the dense peer (``bm25aug.search.dense``).

Like the dense peer, it encodes the whole corpus before its first query; the vectors are made
once per corpus and model and kept in the cache with the seconds the encoding took
(``bm25aug.dense.sparse_embeddings``). Rows are Lucene doc numbers, so its rows and BM25 hits share
ids; the search, ties by doc number, is the dense peer's (``bm25aug.search.dense.ExactSearcher``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bm25aug.dense.sparse_embeddings import corpus_vectors
from bm25aug.dense.splade import SparseModel, load_splade_model
from bm25aug.lucene.reader import LuceneIndex
from bm25aug.search.dense import ExactSearcher

__all__ = ["SpladeSearcher", "load_splade_model"]


class SpladeSearcher(ExactSearcher):
    """Exact sparse dot-product search over an index's documents; hits as ``BM25Searcher``'s.
    ``model``: a ``SparseModel``, or what ``load_splade_model`` takes (None: SPLADE-tiny)."""

    def __init__(self, index: str | Path | LuceneIndex, model: SparseModel | str | Path | None = None):
        super().__init__(index, "the SPLADE peer")
        self.model = load_splade_model(model)
        self.vectors, self.encode_seconds = corpus_vectors(self.index, self.model)

    def scores(self, query_vector) -> np.ndarray:
        """Every document's score for one query's vector (a 1 x vocabulary sparse row): the exact
        dot product, float32."""
        return np.asarray(self.vectors @ query_vector.toarray().ravel(), np.float32)
