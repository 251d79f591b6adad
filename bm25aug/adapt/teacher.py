"""The teacher's scores of (pseudo-query, candidate document) pairs.

The teacher is a dense model (``bm25aug.dense``): ``ADAPT_TEACHER`` (all-MiniLM-L6-v2, the teacher
of every run docs/adapt.md records) unless one is named (``make_teacher("dense:MODEL", index)`` or
its ``model``, what ``load_dense_model`` takes: ``dense:bge-small-en-v1.5`` (fp32, the dense peer's
default from issue 58 to 67); measured with adapt on SciFact and NFCorpus it taught the BM25 weights no more than
MiniLM, both gates serving plain BM25: docs/adapt.md). Every document of the index is encoded
once and cached as the peer caches it (keyed by the corpus and the model), after which a pair
costs one dot product. That encoding is most of adapt's cost (docs/adapt.md). Rows are Lucene doc
numbers of the flat index, the trainer's rows.
"""

from __future__ import annotations

import time

import numpy as np

QUERY_BATCH = 64
ADAPT_TEACHER = "all-MiniLM-L6-v2"  # "dense": bge-small-en-v1.5 taught no more (docs/adapt.md, issue 58)


class DenseTeacher:
    """Cosine similarity of the dense peer's query and document vectors."""

    def __init__(self, index, model=None):
        from bm25aug.dense.embeddings import corpus_embeddings
        from bm25aug.dense.loading import load_dense_model

        self.model = load_dense_model(model)
        self.name = f"dense: {self.model.name} (bi-encoder, cosine)"
        start = time.perf_counter()
        self.embeddings, self.encode_seconds = corpus_embeddings(index, self.model)
        self.load_seconds = time.perf_counter() - start  # the encoding's seconds when not cached, else a read

    def query_vectors(self, queries: list[str], batch: int = QUERY_BATCH) -> np.ndarray:
        rows = [self.model.encode_queries(queries[at:at + batch]) for at in range(0, len(queries), batch)]
        return np.concatenate(rows) if rows else np.zeros((0, self.embeddings.shape[1]), np.float32)

    def scores(self, queries: list[str], rows: list[list[int]]) -> list[np.ndarray]:
        """Each query's cosine with each of its rows."""
        vectors = self.query_vectors(queries)
        return [self.embeddings[np.asarray(r, np.int64)] @ v if len(r) else np.zeros(0, np.float32)
                for v, r in zip(vectors, rows)]


def make_teacher(name: str, index, model=None):
    """The teacher named ``name`` (``AdaptConfig.teacher``) over ``index`` (an open ``LuceneIndex``):
    "dense" is ``model`` (None: ``ADAPT_TEACHER``), "dense:MODEL" the dense model MODEL (e.g.
    "dense:bge-small-en-v1.5")."""
    return DenseTeacher(index, name.partition(":")[2] or model or ADAPT_TEACHER)
