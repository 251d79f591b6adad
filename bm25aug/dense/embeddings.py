"""The dense index: every document of a Lucene index encoded by a dense model, made once per corpus
and model and kept in the cache (``~/.cache/bm25aug/dense/<key>/``).

The key is the corpus (the corpus fingerprint and flavor of the index's ``meta.json``; a stock
index without one: its commit), the model's ``digest`` and ``RECIPE``, never the index build: a
rebuilt index of the same corpus (a fresh clone's CI) reuses the embeddings. They are stored in
external-id order, which no build changes, and handed out in the index's Lucene doc-number order,
so dense rows and BM25 hits share ids. ``dense.json`` records the corpus, the model, the id table's
digest (checked on every load) and the seconds the encoding took; evaluation reports that cost.

Documents are the index's stored ``contents`` (title and text, what BM25 searched). Encoding
writes each finished chunk of ``CHUNK_DOCS`` documents atomically into ``<key>.partial/``, so an
interrupted encoding continues from its last chunk; the finished embeddings appear in one rename.
Two processes never encode the same key at once (a lock; the second reuses the first's). The
machinery is the SPLADE peer's too (``bm25aug.dense.corpus_cache``); ``DenseStore`` is how this
peer keeps its vectors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bm25aug.dense.corpus_cache import CHUNK_DOCS, cached_corpus, contents_text, corpus_identity
from bm25aug.dense.models import DenseModel
from bm25aug.io import CACHE_ROOT

__all__ = ["CHUNK_DOCS", "DENSE", "EMBEDDINGS", "INFO", "RECIPE", "DenseStore", "contents_text",
           "corpus_embeddings", "corpus_identity"]
DENSE = "dense"  # the embeddings' place under CACHE_ROOT
RECIPE = "stored contents, external-id order, float32"
EMBEDDINGS, INFO = "embeddings.npy", "dense.json"


class DenseStore:
    """The dense peer's ``VectorStore``: a float32 array of unit vectors (``np.save``)."""

    space, recipe, vectors_file, info_file, what = DENSE, RECIPE, EMBEDDINGS, INFO, "a dense embedding cache"

    def plan(self, model: DenseModel) -> dict:
        return {}

    def chunk(self, encoded) -> np.ndarray:
        return np.asarray(encoded, np.float32)

    def save_chunk(self, f, vectors: np.ndarray, seconds: float) -> None:
        np.savez(f, vectors=vectors, seconds=seconds)

    def load_chunk(self, saved, rows: int, dim: int) -> np.ndarray | None:
        vectors = saved["vectors"]
        return vectors if vectors.shape == (rows, dim) else None

    def join(self, parts: list[np.ndarray], dim: int) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)

    def save(self, path: Path, vectors: np.ndarray) -> None:
        np.save(path, vectors)

    def load(self, path: Path) -> np.ndarray:
        return np.load(path)

    def fits(self, vectors: np.ndarray, expected: dict, info: dict) -> bool:
        return vectors.shape == (expected["documents"], info.get("dim"))

    def summary(self, vectors: np.ndarray, dim: int) -> dict:
        return {"dim": int(dim)}


def corpus_embeddings(index, model: DenseModel, chunk: int = CHUNK_DOCS) -> tuple[np.ndarray, float]:
    """The unit vector of every document of ``index`` (a ``LuceneIndex``), one row per Lucene doc
    number, and the seconds their encoding took: from the cache when this corpus was encoded by
    this model before, else encoded now (resuming an interrupted encoding)."""
    return cached_corpus(index, model, DenseStore(), CACHE_ROOT, chunk)
