"""The dense peer: a bi-encoder (bge-small-en-v1.5 by default, all-MiniLM-L6-v2 as an option;
``bm25aug.dense``) with exact inner product over every document, and its Reciprocal Rank Fusion
with bm25-flat, as BEIR and Contriever compare sparse retrievers against dense and hybrid ones.

Unlike bm25aug, a dense retriever must encode the whole corpus before its first query. The
embeddings are made once per corpus and model and kept in the cache, with the seconds the encoding
took (``bm25aug.dense.embeddings``): evaluation reports that cost beside the latency. Rows are
Lucene doc numbers, so dense rows and BM25 hits share ids.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bm25aug.dense.embeddings import contents_text as _contents  # noqa: F401 (callers read stored documents with it)
from bm25aug.dense.embeddings import corpus_embeddings
from bm25aug.dense.loading import load_dense_model
from bm25aug.dense.models import DenseModel
from bm25aug.limits import check, check_query
from bm25aug.lucene.ranking import EMPTY, TopK
from bm25aug.lucene.reader import LuceneIndex
from bm25aug.progress import progress

__all__ = ["DenseSearcher", "HybridSearcher", "corpus_embeddings", "load_dense_model"]
RRF_K = 60  # Cormack et al.'s constant, as Pyserini's fusion uses
QUERY_BATCH = 32


def _top(scores: np.ndarray, k: int) -> TopK:
    """The k best rows by score, ties by row (a stable, deterministic order)."""
    k = min(k, len(scores))
    if not k:
        return EMPTY
    best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    order = np.lexsort((best, -scores[best]))
    return TopK(best[order].astype(np.int64), scores[best[order]].astype(np.float32))


class DenseSearcher:
    """Exact inner-product search over an index's documents; hits as ``BM25Searcher``'s. ``model``:
    a ``DenseModel``, or what ``load_dense_model`` takes (None: bge-small-en-v1.5)."""

    def __init__(self, index: str | Path | LuceneIndex, model: DenseModel | str | Path | None = None):
        self.index = index if isinstance(index, LuceneIndex) else LuceneIndex(index)
        self.model = load_dense_model(model)
        self.embeddings, self.encode_seconds = corpus_embeddings(self.index, self.model)

    @property
    def docids(self) -> np.ndarray:
        return self.index.docids

    def hits(self, top: TopK):
        from bm25aug.search.bm25 import to_hits

        return to_hits(self.index.docids, top)

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        check("k", k)
        if not check_query(query).strip():
            return EMPTY
        return _top(self.embeddings @ self.model.encode_queries([query])[0], k)

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]:
        """Queries encoded ``QUERY_BATCH`` at a time (fp32: a query's vector does not depend on its
        batch, up to float rounding); ``threads`` is the model's business here, not Java's."""
        check("k", k)
        tops = []
        for at in progress(range(0, len(queries), QUERY_BATCH), desc=desc, unit="batch", disable=desc is None):
            chunk = [check_query(q) for q in queries[at:at + QUERY_BATCH]]
            vectors = self.model.encode_queries([q if q.strip() else "." for q in chunk])
            tops += [_top(self.embeddings @ v, k) if q.strip() else EMPTY for q, v in zip(chunk, vectors)]
        return tops


class HybridSearcher:
    """Reciprocal Rank Fusion of bm25-flat and the dense peer (``model``, as ``DenseSearcher``
    takes it): each document scores sum(1 / (RRF_K + rank)) over the two top-``depth`` lists."""

    def __init__(self, index_dir: str | Path, k1: float, b: float, depth: int = 1000,
                 model: DenseModel | str | Path | None = None):
        from bm25aug.search.bm25 import BM25Searcher

        self.bm25 = BM25Searcher(index_dir, k1, b, flavor="flat")
        self.dense = DenseSearcher(self.bm25.index, model)  # the same open index: its rows are BM25's doc numbers
        self.depth, self.encode_seconds = depth, self.dense.encode_seconds

    @property
    def docids(self) -> np.ndarray:
        return self.bm25.docids

    def hits(self, top: TopK):
        return self.bm25.hits(top)

    @staticmethod
    def fuse(sparse: TopK, dense: TopK, k: int) -> TopK:
        """The fused top k over the two lists' documents alone (no array the size of the corpus
        per query); equal scores in Lucene doc order."""
        ids = np.concatenate([sparse.lucene_ids, dense.lucene_ids]).astype(np.int64)
        contributions = np.concatenate([1.0 / (RRF_K + np.arange(1, len(t.lucene_ids) + 1)) for t in (sparse, dense)])
        found, where = np.unique(ids, return_inverse=True)
        top = _top(np.bincount(where, weights=contributions, minlength=len(found)), k)
        return TopK(found[top.lucene_ids], top.scores)

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        return self.fuse(self.bm25.search_arrays(query, self.depth), self.dense.search_arrays(query, self.depth), k)

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]:
        sparse = self.bm25.batch_search_arrays(queries, self.depth, threads, desc)
        dense = self.dense.batch_search_arrays(queries, self.depth, threads)
        return [self.fuse(s, d, k) for s, d in zip(sparse, dense)]
