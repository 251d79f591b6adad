"""The dense peer: a bi-encoder (bge-small-en-v1.5 by default, all-MiniLM-L6-v2 as an option;
``bm25aug.dense``) with exact inner product over every document, as BEIR and Contriever compare sparse retrievers
against dense ones (its fusion with a sparse searcher: ``bm25aug.search.hybrid``), or, past brute
force, a Lucene HNSW index of the same embeddings built and searched through Anserini, as
Pyserini's ``LuceneHnswDenseSearcher`` does (``bm25aug.dense.hnsw``; ``search`` says which).

Unlike bm25aug, a dense retriever must encode the whole corpus before its first query. The
embeddings are made once per corpus and model and kept in the cache, with the seconds the encoding
took (``bm25aug.dense.embeddings``): evaluation reports that cost beside the latency. Rows are
Lucene doc numbers, so dense rows and BM25 hits share ids. What it shares with the SPLADE peer
(``bm25aug.search.splade``), exact search over every document's vector, is ``ExactSearcher``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bm25aug.dense.embeddings import corpus_embeddings, top_rows
from bm25aug.dense.hnsw import choose_hnsw
from bm25aug.dense.loading import load_dense_model
from bm25aug.dense.models import DenseModel, Encoder
from bm25aug.limits import check, check_query
from bm25aug.ranking import EMPTY, TopK
from bm25aug.lucene.reader import LuceneIndex
from bm25aug.progress import progress
from bm25aug.search.hits import Searches, to_hits
from bm25aug.search.indexes import folder_only

__all__ = ["DenseSearcher", "ExactSearcher", "corpus_embeddings", "load_dense_model", "top_rows"]
QUERY_BATCH = 32


class ExactSearcher(Searches):
    """Exact search over every document's vector of an index (a ``LuceneIndex``, or the folder
    ``peer`` opens); hits as ``BM25Searcher``'s. A peer sets ``model`` (queries' vectors) and
    says how a query's vector scores every document (``scores``)."""

    model: Encoder

    def __init__(self, index: str | Path | LuceneIndex, peer: str):
        self.index = index if isinstance(index, LuceneIndex) else LuceneIndex(
            folder_only(index, peer, "the stored documents it encodes"))

    @property
    def docids(self) -> np.ndarray:
        return self.index.docids

    def verify(self, dataset) -> None:
        """That the index holds ``dataset``'s very corpus (``Index.verify``)."""
        self.index.verify(dataset)

    def hits(self, top: TopK):
        return to_hits(self.index.docids, top)

    def scores(self, query_vector) -> np.ndarray:
        """Every document's score for one query's vector, one per Lucene doc number."""
        raise NotImplementedError

    def top(self, query_vector, k: int) -> TopK:
        """The k best doc numbers for one query's vector, ties by doc number."""
        return top_rows(self.scores(query_vector), k)

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        check("k", k)
        if not check_query(query).strip():
            return EMPTY
        return self.top(self.model.encode_queries([query])[0], k)

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]:
        """Queries encoded ``QUERY_BATCH`` at a time (a query's vector does not depend on its batch,
        up to float rounding); ``threads`` is the model's business here, not Java's."""
        check("k", k)
        tops = []
        for at in progress(range(0, len(queries), QUERY_BATCH), desc=desc, unit="batch", disable=desc is None):
            chunk = [check_query(q) for q in queries[at:at + QUERY_BATCH]]
            vectors = self.model.encode_queries([q if q.strip() else "." for q in chunk])
            tops += [self.top(vectors[i], k) if q.strip() else EMPTY for i, q in enumerate(chunk)]
        return tops


class DenseSearcher(ExactSearcher):
    """Inner-product search over an index's documents; hits as ``BM25Searcher``'s. ``model``: a
    ``DenseModel``, or what ``load_dense_model`` takes (None: ``DEFAULT_DENSE_MODEL``). ``search``:
    ``"auto"`` (the default, None too: exact below ``EXACT_BELOW`` documents, whatever the cache
    holds; from it, the corpus's HNSW index, built first when missing),
    ``"exact"``, ``"hnsw"`` (built when missing), or an HNSW index folder (``bm25aug.dense.hnsw``;
    checked first: a damaged or foreign one is one line). ``search_kind`` says which it searches;
    scores are exact inner products either way."""

    def __init__(self, index: str | Path | LuceneIndex, model: DenseModel | str | Path | None = None,
                 search: str | Path | None = "auto"):
        super().__init__(index, "the dense peer")
        self.model = load_dense_model(model)
        self.embeddings, self.encode_seconds = corpus_embeddings(self.index, self.model)
        self.hnsw = choose_hnsw(self.index, self.model, self.embeddings, search)
        self.search_kind = "exact" if self.hnsw is None else "hnsw"

    def scores(self, query_vector: np.ndarray) -> np.ndarray:
        """Every document's inner product with one query's unit vector (fp32)."""
        return self.embeddings.scores(query_vector)

    def top(self, query_vector: np.ndarray, k: int) -> TopK:
        """Exact: the mapped embeddings scored a block at a time; HNSW: its candidates, rescored."""
        if self.hnsw is not None:
            return self.hnsw.search(query_vector, k)
        return self.embeddings.top(query_vector, k)
