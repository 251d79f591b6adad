"""The dense index: every document of a Lucene index encoded by a dense model, made once per corpus
and model and kept in the cache (``~/.cache/bm25aug/dense/<key>/``).

The key is the corpus (the corpus fingerprint and flavor of the index's ``meta.json``; a stock
index without one: its commit), the model's ``digest`` and ``RECIPE``, never the index build: a
rebuilt index of the same corpus (a fresh clone's CI) reuses the embeddings. They are stored in
external-id order, which no build changes, as one ``.npy`` file that is mapped, never read into
memory, and handed out as ``LuceneRows``: rows in the index's Lucene doc-number order (mapped
through ``LuceneIndex.id_rank``, no permuted copy), so dense rows and BM25 hits share ids. Exact
search scores the mapped file ``SCORE_ROWS`` rows at a time and keeps each block's best, so memory
does not grow with the corpus. ``dense.json`` records the corpus, the model, the id table's
digest (checked on every load) and the seconds the encoding took; evaluation reports that cost.

Documents are the index's stored ``contents`` (title and text, what BM25 searched). Encoding
writes each finished chunk of ``CHUNK_DOCS`` documents atomically into ``<key>.partial/``, so an
interrupted encoding continues from its last chunk; the finished embeddings are streamed from the
chunks into the ``.npy`` file (plain writes, so that a full disk is an error, never a SIGBUS) and
appear in one rename.
Two processes never encode the same key at once (a lock; the second reuses the first's). The
machinery is the SPLADE peer's too (``bm25aug.dense.corpus_cache``); ``DenseStore`` is how this
peer keeps its vectors.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bm25aug.dense.corpus_cache import CHUNK_DOCS, cached_corpus, contents_text, corpus_identity
from bm25aug.dense.models import DenseModel
from bm25aug.io import CACHE_ROOT
from bm25aug.ranking import EMPTY, TopK

__all__ = ["CHUNK_DOCS", "DENSE", "EMBEDDINGS", "INFO", "RECIPE", "DenseStore", "LuceneRows", "contents_text",
           "corpus_embeddings", "corpus_identity", "top_of", "top_rows"]
DENSE = "dense"  # the embeddings' place under CACHE_ROOT
RECIPE = "stored contents, external-id order, float32"
EMBEDDINGS, INFO = "embeddings.npy", "dense.json"
SCORE_ROWS = 8192  # rows exact search scores at a time (a multiple of PAD)
PAD = 16  # BLAS scores rows in groups: a block's last rows are padded to a whole group (``dot``)


def top_of(scores: np.ndarray, rows: np.ndarray, k: int) -> TopK:
    """The k best ``rows`` by score, ties by row (every row tied at the cut is weighed)."""
    k = min(k, len(scores))
    if not k:
        return EMPTY
    keep = np.arange(len(scores))
    if k < len(scores):
        keep = np.flatnonzero(scores >= -np.partition(-scores, k - 1)[k - 1])
    pick = keep[np.lexsort((rows[keep], -scores[keep]))[:k]]
    return TopK(rows[pick].astype(np.int64), scores[pick].astype(np.float32))


def top_rows(scores: np.ndarray, k: int) -> TopK:
    """The k best rows by score, ties by row (a stable, deterministic order)."""
    return top_of(scores, np.arange(len(scores), dtype=np.int64), k)


def dot(rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Each row's inner product with ``vector`` (fp32), the same bits wherever the row sits: BLAS
    scores rows in groups and a last, partial group another way, so that one is padded."""
    rows = np.asarray(rows)
    whole = len(rows) - len(rows) % PAD
    out = np.empty(len(rows), np.float32)
    out[:whole] = rows[:whole] @ vector
    if whole < len(rows):
        padded = np.zeros((PAD, rows.shape[1]), rows.dtype)
        padded[:len(rows) - whole] = rows[whole:]
        out[whole:] = (padded @ vector)[:len(rows) - whole]
    return out


class LuceneRows:
    """A corpus's embeddings (``vectors``: external-id order, mapped from the cache) as rows in an
    index's Lucene doc-number order, without a permuted copy: ``rows[i]`` (an int, a slice or an
    array of them) is doc number i's vector, ``rows @ q`` every doc number's score, ``top`` the
    best of them; ``np.asarray`` makes the permuted copy (small corpora, tests)."""

    def __init__(self, vectors: np.ndarray, by_id: np.ndarray, id_rank: np.ndarray):
        self.vectors, self.by_id, self.id_rank = vectors, by_id, id_rank
        self.shape, self.dtype = vectors.shape, vectors.dtype

    @property
    def nbytes(self) -> int:
        return int(self.vectors.nbytes)

    def __len__(self) -> int:
        return len(self.vectors)

    def __getitem__(self, rows) -> np.ndarray:
        return np.asarray(self.vectors[self.id_rank[rows]])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = np.asarray(self.vectors[self.id_rank])
        return whole if dtype is None else whole.astype(dtype)

    def __matmul__(self, vector: np.ndarray) -> np.ndarray:
        return self.scores(vector)

    def scores(self, vector: np.ndarray) -> np.ndarray:
        """Every doc number's inner product with ``vector`` (fp32), one block at a time."""
        out = np.empty(len(self), np.float32)
        for at in range(0, len(self), SCORE_ROWS):
            out[self.by_id[at:at + SCORE_ROWS]] = dot(self.vectors[at:at + SCORE_ROWS], vector)
        return out

    def rescore(self, numbers: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """The inner products of the doc ``numbers`` only: the bits ``scores`` gives them."""
        return dot(self.vectors[self.id_rank[np.asarray(numbers, np.int64)]], vector)

    def top(self, vector: np.ndarray, k: int) -> TopK:
        """The k best doc numbers for ``vector``, ties by doc number (``top_rows`` of ``scores``),
        each block's best kept: memory does not grow with the corpus."""
        best = EMPTY
        for at in range(0, len(self), SCORE_ROWS):
            block = top_of(dot(self.vectors[at:at + SCORE_ROWS], vector), self.by_id[at:at + SCORE_ROWS], k)
            best = block if not at else top_of(np.concatenate([best.scores, block.scores]),
                                               np.concatenate([best.lucene_ids, block.lucene_ids]), k)
        return best


class DenseStore:
    """The dense peer's ``VectorStore``: a float32 array of unit vectors (one ``.npy``, mapped)."""

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

    def write(self, path: Path, parts, rows: int, dim: int) -> np.ndarray:
        """The ``.npy`` (np.save's bytes) written with plain writes, header then chunk after chunk: a
        full disk is an ``OSError`` (ENOSPC) at the write that finds no room, where the pages of a
        mapping would be a SIGBUS."""
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
                  "shape": (rows, dim)}
        with open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(f, header)
            for part in parts:
                f.write(np.ascontiguousarray(part, dtype=np.float32).data)
            f.flush()
            os.fsync(f.fileno())
        return self.load(path)

    def load(self, path: Path) -> np.ndarray:
        return np.load(path, mmap_mode="r")

    def ordered(self, vectors: np.ndarray, index) -> LuceneRows:
        return LuceneRows(vectors, index.by_id, index.id_rank)

    def fits(self, vectors: np.ndarray, expected: dict, info: dict) -> bool:
        return vectors.shape == (expected["documents"], info.get("dim")) and vectors.dtype == np.float32

    def summary(self, vectors: np.ndarray, dim: int) -> dict:
        return {"dim": int(dim)}


def corpus_embeddings(index, model: DenseModel, chunk: int = CHUNK_DOCS) -> tuple[LuceneRows, float]:
    """The unit vector of every document of ``index`` (a ``LuceneIndex``), one row per Lucene doc
    number (``LuceneRows``), and the seconds their encoding took: from the cache when this corpus
    was encoded by this model before, else encoded now (resuming an interrupted encoding)."""
    return cached_corpus(index, model, DenseStore(), CACHE_ROOT, chunk)
