"""The sparse index: every document of a Lucene index encoded by a SPLADE model
(``bm25aug.dense.splade``), made once per corpus and model and kept in the cache
(``~/.cache/bm25aug/splade/<key>/``), as ``bm25aug.dense.embeddings`` keeps the dense peer's.

The key is the corpus (``corpus_cache.corpus_identity``: a rebuilt index of the same corpus reuses
the vectors), the model's ``digest`` and ``RECIPE``. The vectors are a scipy.sparse CSR matrix
(``vectors.npz``, ``scipy.sparse.save_npz``), stored in external-id order and handed out in the
index's Lucene doc-number order; ``splade.json`` records the corpus, the model, the id table's
digest (checked on every load) and the seconds the encoding took. Encoding writes each finished
chunk of ``CHUNK_DOCS`` documents atomically into ``<key>.partial/``, so an interrupted encoding
continues from its last chunk; the finished matrix appears in one rename. Two processes never
encode the same key at once (a lock; the second reuses the first's): the dense peer's machinery
(``bm25aug.dense.corpus_cache``), ``SparseStore`` being how this peer keeps its vectors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from bm25aug.dense.corpus_cache import CHUNK_DOCS, cached_corpus
from bm25aug.dense.splade import SparseModel
from bm25aug.io import CACHE_ROOT

SPLADE = "splade"  # the vectors' place under CACHE_ROOT
RECIPE = "stored contents, external-id order, float32 CSR"
VECTORS, INFO = "vectors.npz", "splade.json"


class SparseStore:
    """The SPLADE peer's ``VectorStore``: a float32 CSR matrix (``scipy.sparse.save_npz``)."""

    space, recipe, vectors_file, info_file, what = SPLADE, RECIPE, VECTORS, INFO, "a SPLADE vector cache"

    def plan(self, model: SparseModel) -> dict:
        return {"dim": int(model.dim)}

    def chunk(self, encoded) -> sp.csr_matrix:
        return sp.csr_matrix(encoded, dtype=np.float32)

    def save_chunk(self, f, vectors: sp.csr_matrix, seconds: float) -> None:
        np.savez(f, data=vectors.data, indices=vectors.indices, indptr=vectors.indptr, seconds=seconds)

    def load_chunk(self, saved, rows: int, dim: int) -> sp.csr_matrix | None:
        vectors = sp.csr_matrix((saved["data"], saved["indices"], saved["indptr"]), shape=(rows, dim))
        return vectors if vectors.dtype == np.float32 else None

    def write(self, path: Path, parts, rows: int, dim: int) -> sp.csr_matrix:
        """The chunks joined (a CSR matrix is written whole) and saved."""
        parts = list(parts)
        matrix = sp.vstack(parts, format="csr") if parts else sp.csr_matrix((rows, dim), dtype=np.float32)
        matrix = matrix.astype(np.float32)
        with open(path, "wb") as f:
            sp.save_npz(f, matrix)
        return matrix

    def load(self, path: Path) -> sp.csr_matrix:
        return sp.load_npz(path).tocsr()

    def ordered(self, vectors: sp.csr_matrix, index) -> sp.csr_matrix:
        return vectors[index.id_rank]

    def fits(self, vectors: sp.csr_matrix, expected: dict, info: dict) -> bool:
        return vectors.shape == (expected["documents"], expected["dim"]) and vectors.dtype == np.float32

    def summary(self, vectors: sp.csr_matrix, dim: int) -> dict:
        n = vectors.shape[0]
        return {"nonzeros_per_doc": round(vectors.nnz / n, 1) if n else 0}


def corpus_vectors(index, model: SparseModel, chunk: int = CHUNK_DOCS) -> tuple[sp.csr_matrix, float]:
    """The SPLADE vector of every document of ``index`` (a ``LuceneIndex``), one row per Lucene
    doc number, and the seconds their encoding took: from the cache when this corpus was encoded
    by this model before, else encoded now (resuming an interrupted encoding)."""
    return cached_corpus(index, model, SparseStore(), CACHE_ROOT, chunk)
