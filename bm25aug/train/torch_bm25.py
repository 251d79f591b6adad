"""BM25 in torch, with the statistics and rounding Lucene uses, so training scores are search scores.

Lucene's ``BM25Similarity`` scores a boosted term query as
``sum_t boost_t * idf_t * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` with
``idf_t = ln(1 + (N - df + 0.5) / (df + 0.5))``. It has no ``(k1 + 1)`` factor (a constant, so
rankings are the paper's) and it stores ``dl`` lossily in one byte (``SmallFloat.intToByte4``);
we decode the same byte back. Query-side weights ``w * (bow + a)`` are the boosts, so
``score = (boost * idf) @ f(d)ᵀ`` with ``f(d)`` a sparse docs x vocabulary matrix.

Everything comes from the index without walking its postings (``bm25aug.lucene.doc_terms``): df from
the term dictionary, N and avgdl from the field statistics, dl from the norms, and the row f(d)
of a document only when training first touches it, then kept. Setup therefore costs
O(vocabulary + training documents), not O(corpus).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bm25aug.lucene.doc_terms import DocTermReader, field_statistics, term_dictionary
from bm25aug.lucene.index import META_FILE, IndexMeta
from bm25aug.bm25_defaults import B, K1
from bm25aug.lucene.reader import LuceneIndex
from bm25aug.progress import progress

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


@dataclass
class BM25Params:
    k1: float = K1
    b: float = B
    bag_of_words: bool = False  # ablation: score (w ⊙ (bow + a))ᵀ bow(d), no idf, no tf saturation


class TorchBM25:
    """Sparse ``f(d)`` and dense ``idf`` over term columns: the tokenizer vocabulary (``vocab``,
    for a ``wp`` index), or the index's own terms (``vocab=None``, e.g. a ``flat`` index).
    Rows are Lucene doc numbers (``rows`` maps external ids to them)."""

    def __init__(self, index: LuceneIndex | str | Path, vocab: dict[str, int] | None, params: BM25Params | None = None):
        """``index``: a folder, or an open ``LuceneIndex`` (a searcher's: its reader and its id
        tables are then shared, not loaded a second time)."""
        self.params = params or BM25Params()
        self.index = index if isinstance(index, LuceneIndex) else LuceneIndex(index)
        # A wp index is pre-tokenized: a document's stored raw text is its terms. A stock index
        # (no meta.json) is taken as wp when it is scored over a WordPiece vocabulary.
        has_meta = (self.index.path / META_FILE).exists()
        wp = IndexMeta.load(self.index.path, probe=False).flavor == "wp" if has_meta else vocab is not None
        self.reader = DocTermReader(self.index, pretokenized=wp)
        terms, doc_freq = term_dictionary(self.index)
        vocab = vocab if vocab is not None else {t: i for i, t in enumerate(terms)}
        self.columns = vocab  # term -> column of the score's query side
        self.terms = [t for t, _ in sorted(vocab.items(), key=lambda tc: tc[1])]  # column -> term
        vocab_size = max(vocab.values()) + 1
        df = np.zeros(vocab_size, np.float64)
        cols = np.asarray([vocab.get(t, -1) for t in terms], np.int64)  # terms outside the vocabulary cannot be predicted
        df[cols[cols >= 0]] = doc_freq[cols >= 0]
        self.df = torch.from_numpy(df.astype(np.float32))
        self.num_docs = self.index.num_docs
        doc_count, total_terms = field_statistics(self.index)
        # Lucene: idf over the field's docCount, avgdl = sumTotalTermFreq / docCount kept as a float.
        self.avgdl = np.float32(total_terms / max(doc_count, 1))
        if self.params.bag_of_words:
            self.idf = torch.ones(vocab_size)
        else:
            idf = np.log(1 + (doc_count - df + 0.5) / (df + 0.5)).astype(np.float32)
            idf[df == 0] = 0.0
            self.idf = torch.from_numpy(idf)
        self._rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # Lucene doc -> (columns, f values)
        self._held_out = 0  # rows made by held_out_row so far

    @property
    def docids(self) -> np.ndarray:
        """External id of every row (Lucene doc)."""
        return self.index.docids

    @property
    def rows_read(self) -> int:
        """Documents whose terms were read from the index so far."""
        return self.reader.reads

    def rows(self, docids: list[str]) -> list[int]:
        """Rows of external ids; an id the index lacks is an error."""
        rows = self.index.doc_numbers(docids)
        if np.any(rows < 0):
            missing = np.asarray(docids, dtype=object)[rows < 0][0]
            raise KeyError(f"document {missing!r} is not in {self.index.path}")
        return rows.tolist()

    def prefetch(self, rows, desc: str | None = None) -> None:
        """Read the f(d) rows of ``rows`` not read yet (``desc``: a progress bar on a terminal)."""
        todo = np.unique(np.asarray([r for r in rows if r not in self._rows], np.int64))
        if not len(todo):
            return
        lengths = LENGTH_TABLE[self.reader.norm_bytes(todo)]
        for doc, length in progress(zip(todo.tolist(), lengths), total=len(todo), desc=desc, unit="doc",
                                    disable=desc is None):
            self._rows[doc] = self._row(self.reader.terms(doc), length)

    def row(self, doc: int) -> tuple[np.ndarray, np.ndarray]:
        """One document's f(d) row: its term columns and their values (read first if need be)."""
        self.prefetch([doc])
        return self._rows[doc]

    def held_out_row(self, doc: int, removed: Mapping[str, int]) -> int:
        """A row for document ``doc`` with ``removed`` term counts taken out of it, and its length
        shortened by as many terms (its norm byte re-encoded as Lucene would): the positive of a
        pseudo-query cut from ``doc`` (``bm25aug.train.pseudo``), which must not find its own words in
        it. Rows of this kind get negative numbers; ``score`` takes them like any other."""
        counts = dict(self.reader.terms(doc))
        for term, n in removed.items():
            if counts.get(term, 0) > n:
                counts[term] -= n
            else:
                counts.pop(term, None)
        length = int(LENGTH_TABLE[self.reader.norm_bytes(np.asarray([doc]))[0]]) - sum(removed.values())
        row = -1 - self._held_out
        self._held_out += 1
        self._rows[row] = self._row(counts, LENGTH_TABLE[int_to_byte4(max(length, 1))])
        return row

    def _row(self, counts: Mapping[str, int], length: float) -> tuple[np.ndarray, np.ndarray]:
        """One row of f(d): its columns, and Lucene's float32 arithmetic step by step: normInverse
        from the decoded length, then score = weight - weight / (1 + tf * normInverse) = weight * f."""
        k1, b, one = np.float32(self.params.k1), np.float32(self.params.b), np.float32(1)
        inverse = one / (k1 * ((one - b) + b * np.float32(length) / self.avgdl))
        cols = np.asarray([self.columns.get(t, -1) for t in counts], np.int64)
        tf = np.asarray(list(counts.values()), np.float32)[cols >= 0]
        cols = cols[cols >= 0]
        order = np.argsort(cols)
        cols, tf = cols[order], tf[order]
        values = np.ones_like(tf) if self.params.bag_of_words else (one - one / (one + tf * inverse))
        return cols, values.astype(np.float32)

    def doc_matrix(self, rows: list[int] | np.ndarray) -> torch.Tensor:
        """``f(d)`` of the given documents as a sparse COO tensor (n x vocab)."""
        self.prefetch(rows)
        parts = [self._rows[int(r)] for r in rows]
        lengths = [len(c) for c, _ in parts]
        row_idx = np.repeat(np.arange(len(parts)), lengths)
        cols = np.concatenate([c for c, _ in parts]) if parts else np.zeros(0, np.int64)
        vals = np.concatenate([v for _, v in parts]) if parts else np.zeros(0, np.float32)
        idx = torch.from_numpy(np.vstack([row_idx, cols]).astype(np.int64))
        return torch.sparse_coo_tensor(idx, torch.from_numpy(vals), (len(parts), len(self.idf)),
                                       check_invariants=False).coalesce()

    def score(self, boosts: torch.Tensor, rows: list[int] | np.ndarray) -> torch.Tensor:
        """Scores (queries x docs) of query boosts ``w ⊙ (bow + a)`` (queries x vocab) against ``rows``."""
        docs = self.doc_matrix(rows).to(boosts.device, non_blocking=True)
        return torch.sparse.mm(docs, (boosts * self.idf.to(boosts.device)).t()).t()
