"""BM25 in torch, with the statistics and rounding Lucene uses, so training scores are search scores.

Lucene's ``BM25Similarity`` scores a boosted term query as
``sum_t boost_t * idf_t * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` with
``idf_t = ln(1 + (N - df + 0.5) / (df + 0.5))``. It has no ``(k1 + 1)`` factor (a constant, so
rankings are the paper's) and it stores ``dl`` lossily in one byte (``SmallFloat.intToByte4``);
we decode the same byte back. Query-side weights ``w * (bow + a)`` are the boosts, so
``score = (boost * idf) @ f(d)ᵀ`` with ``f(d)`` a sparse docs x vocabulary matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from bm25aug.index import read_term_matrix

# SmallFloat.intToByte4 / byte4ToInt (org.apache.lucene.util.SmallFloat), ported bit for bit.


def _long_to_int4(i: int) -> int:
    num_bits = i.bit_length()
    if num_bits < 4:
        return i
    shift = num_bits - 4
    encoded = (i >> shift) & 0x07
    return encoded | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits = i & 0x07
    shift = (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_NUM_FREE_VALUES = 255 - _long_to_int4(2**31 - 1)


def int_to_byte4(i: int) -> int:
    """Lucene's one-byte encoding of a document length (unsigned byte value)."""
    return i if i < _NUM_FREE_VALUES else _NUM_FREE_VALUES + _long_to_int4(i - _NUM_FREE_VALUES)


def byte4_to_int(b: int) -> int:
    return b if b < _NUM_FREE_VALUES else _NUM_FREE_VALUES + _int4_to_long(b - _NUM_FREE_VALUES)


LENGTH_TABLE = np.asarray([byte4_to_int(b) for b in range(256)], dtype=np.float64)


def lucene_doc_lengths(lengths: np.ndarray) -> np.ndarray:
    """Document lengths as Lucene sees them after its one-byte norm round trip."""
    return LENGTH_TABLE[np.asarray([int_to_byte4(int(n)) for n in lengths])]


@dataclass
class BM25Params:
    k1: float = 0.9
    b: float = 0.4
    bag_of_words: bool = False  # ablation: score (w ⊙ (bow + a))ᵀ bow(d), no idf, no tf saturation


class TorchBM25:
    """Sparse ``f(d)`` and dense ``idf`` over term columns: the tokenizer vocabulary (``vocab``,
    for a ``wp`` index), or the index's own terms (``vocab=None``, e.g. a ``flat`` index)."""

    def __init__(self, index_dir, vocab: dict[str, int] | None, params: BM25Params | None = None):
        self.params = params or BM25Params()
        tm = read_term_matrix(index_dir)
        self.docids = tm.docids
        self.doc_index = {d: i for i, d in enumerate(tm.docids)}
        vocab = vocab if vocab is not None else {t: i for i, t in enumerate(tm.terms)}
        self.columns = vocab  # term -> column of the score's query side
        self.terms = [t for t, _ in sorted(vocab.items(), key=lambda tc: tc[1])]  # column -> term
        n_docs, vocab_size = tm.tf.shape[0], max(vocab.values()) + 1
        # Index term column -> vocabulary id (terms outside the vocabulary cannot be predicted).
        col_to_vocab = np.asarray([vocab.get(t, -1) for t in tm.terms])
        keep = col_to_vocab >= 0
        remap = sp.csr_matrix((np.ones(keep.sum(), np.float32), (np.flatnonzero(keep), col_to_vocab[keep])),
                              shape=(len(tm.terms), vocab_size))
        tf = (tm.tf @ remap).tocsr()
        df = np.zeros(vocab_size, np.float64)
        df[col_to_vocab[keep]] = tm.doc_freq[keep]
        self.df = torch.from_numpy(df.astype(np.float32))
        self.num_docs = n_docs
        # Lucene: docCount and sumTotalTermFreq of the field; avgdl kept as a float.
        lengths = np.asarray(tm.tf.sum(axis=1)).ravel()
        avgdl = np.float32(lengths.sum() / n_docs)
        if self.params.bag_of_words:
            self.idf = torch.ones(vocab_size)
            values = np.ones_like(tf.data, dtype=np.float32)
        else:
            idf = np.log(1 + (n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)
            idf[df == 0] = 0.0
            self.idf = torch.from_numpy(idf)
            # Lucene's float32 arithmetic, step by step: normInverse per length byte, then
            # score = weight - weight / (1 + tf * normInverse) = weight * f.
            k1, b, one = np.float32(self.params.k1), np.float32(self.params.b), np.float32(1)
            dl = lucene_doc_lengths(lengths).astype(np.float32)
            norm_inverse = one / (k1 * ((one - b) + b * dl / avgdl))
            x = tf.data.astype(np.float32) * np.repeat(norm_inverse, np.diff(tf.indptr))
            values = (one - one / (one + x)).astype(np.float32)
        self.f = sp.csr_matrix((values, tf.indices, tf.indptr), shape=tf.shape)

    def doc_matrix(self, rows: list[int] | np.ndarray) -> torch.Tensor:
        """``f(d)`` of the given documents as a sparse COO tensor (n x vocab)."""
        sub = self.f[np.asarray(rows)].tocoo()
        idx = torch.from_numpy(np.vstack([sub.row, sub.col]).astype(np.int64))
        return torch.sparse_coo_tensor(idx, torch.from_numpy(sub.data), sub.shape, check_invariants=False).coalesce()

    def score(self, boosts: torch.Tensor, rows: list[int] | np.ndarray) -> torch.Tensor:
        """Scores (queries x docs) of query boosts ``w ⊙ (bow + a)`` (queries x vocab) against ``rows``."""
        docs = self.doc_matrix(rows)
        return torch.sparse.mm(docs, (boosts * self.idf.to(boosts.device)).t()).t()

    def rows(self, docids: list[str]) -> list[int]:
        return [self.doc_index[d] for d in docids]
