"""The dense peer with all-MiniLM-L6-v2 (the option; bge-small-en-v1.5, the default, is
tests/test_dense_bge.py), exact inner product, and its RRF hybrid with bm25-flat, on the tiny
corpus: exact search against a brute-force reference, the cache, and the fusion rule."""

from __future__ import annotations

import numpy as np
import pytest

from bm25aug.lucene.ranking import TopK
from bm25aug.search.bm25 import BM25Searcher


@pytest.fixture(scope="module")
def dense(tiny_wp, tmp_path_factory):
    """The tiny flat index's dense searcher (MiniLM), its embeddings cached in a temporary folder."""
    from bm25aug.dense import embeddings
    from bm25aug.search.dense import DenseSearcher

    saved, embeddings.CACHE_ROOT = embeddings.CACHE_ROOT, tmp_path_factory.mktemp("cache")
    yield DenseSearcher(tiny_wp[2], model="all-MiniLM-L6-v2")
    embeddings.CACHE_ROOT = saved


def test_dense_is_exact_inner_product_over_every_document(dense, tiny_wp):
    ds, _, _ = tiny_wp
    assert dense.model.name == "all-MiniLM-L6-v2" and dense.embeddings.shape == (len(ds.corpus), 384)
    assert np.allclose(np.linalg.norm(dense.embeddings, axis=1), 1, atol=1e-5)
    # rows are Lucene doc numbers: each row is its own document's contents, encoded alone
    for row, docid in enumerate(dense.docids):
        alone = dense.model.encode_documents([ds.corpus[docid].contents])[0]
        assert np.allclose(dense.embeddings[row], alone, atol=1e-5)
    query = "big cats lions"
    scores = dense.embeddings @ dense.model.encode_queries([query])[0]
    expected = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:3]
    top = dense.search_arrays(query, 3)
    assert top.lucene_ids.tolist() == expected and dense.hits(top)[0].docid == "d3"
    batch = dense.batch_search_arrays([query, "  ", "pasta sauce"], 3)
    assert batch[0].lucene_ids.tolist() == expected and len(batch[1].lucene_ids) == 0
    assert dense.hits(batch[2])[0].docid == "d5"


def test_embeddings_are_cached_with_their_cost(dense, tiny_wp):
    from bm25aug.search.dense import DenseSearcher

    again = DenseSearcher(tiny_wp[2], dense.model)
    assert np.array_equal(again.embeddings, dense.embeddings) and again.encode_seconds == dense.encode_seconds > 0


def test_hybrid_is_reciprocal_rank_fusion(dense, tiny_wp, monkeypatch):
    from bm25aug.search import dense as module

    monkeypatch.setattr(module, "DenseSearcher", lambda index, model=None: dense)
    hybrid = module.HybridSearcher(tiny_wp[2], 0.9, 0.4)
    sparse = TopK(np.array([3, 1]), np.array([2.0, 1.0], np.float32))
    vectors = TopK(np.array([1, 5, 3]), np.array([0.9, 0.8, 0.7], np.float32))
    fused = hybrid.fuse(sparse, vectors, 3)
    # doc 1: 1/62 + 1/61, doc 3: 1/61 + 1/63, doc 5: 1/62
    assert fused.lucene_ids.tolist() == [1, 3, 5]
    assert fused.scores[0] == pytest.approx(1 / 62 + 1 / 61) and fused.scores[2] == pytest.approx(1 / 62)
    query = "big cats lions"
    expected = hybrid.fuse(BM25Searcher(tiny_wp[2]).search_arrays(query, 1000), dense.search_arrays(query, 1000), 5)
    assert hybrid.search_arrays(query, 5).lucene_ids.tolist() == expected.lucene_ids.tolist()
    assert [t.lucene_ids.tolist() for t in hybrid.batch_search_arrays([query], 5)] == [expected.lucene_ids.tolist()]
