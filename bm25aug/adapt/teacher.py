"""The teacher's scores of (pseudo-query, candidate document) pairs.

The default, and the one measured, is the packaged dense model (all-MiniLM-L6-v2, the dense peer
of ``bm25aug.search.dense``): every document of the index is encoded once and cached as the peer
caches it (keyed by the index's commit and the weights), after which a pair costs one dot product.
That encoding is most of adapt's cost (docs/adapt.md). Rows are Lucene doc numbers of the flat
index, the trainer's rows.
"""

from __future__ import annotations

import time

import numpy as np


class DenseTeacher:
    """Cosine similarity of the dense peer's query and document vectors."""

    name = "dense: all-MiniLM-L6-v2 (bi-encoder, cosine)"

    def __init__(self, index):
        from bm25aug.search.dense import DenseEncoder, corpus_embeddings

        self.encoder = DenseEncoder()
        start = time.perf_counter()
        self.embeddings, self.encode_seconds = corpus_embeddings(index, self.encoder)
        self.load_seconds = time.perf_counter() - start  # the encoding's seconds when not cached, else a read

    def query_vectors(self, queries: list[str], batch: int = 64) -> np.ndarray:
        rows = [self.encoder.encode(queries[at:at + batch]) for at in range(0, len(queries), batch)]
        return np.concatenate(rows) if rows else np.zeros((0, self.embeddings.shape[1]), np.float32)

    def scores(self, queries: list[str], rows: list[list[int]]) -> list[np.ndarray]:
        """Each query's cosine with each of its rows."""
        vectors = self.query_vectors(queries)
        return [self.embeddings[np.asarray(r, np.int64)] @ v if len(r) else np.zeros(0, np.float32)
                for v, r in zip(vectors, rows)]


def make_teacher(name: str, index):
    """The teacher named ``name`` (``AdaptConfig.teacher``) over ``index`` (an open ``LuceneIndex``)."""
    return DenseTeacher(index)
