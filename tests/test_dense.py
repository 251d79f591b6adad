"""The dense peer with all-MiniLM-L6-v2 (the option; bge-small-en-v1.5, the default, is
tests/test_dense_bge.py), exact inner product, on the tiny
corpus: exact search against a brute-force reference and the cache (its fusion with BM25:
tests/test_hybrid.py)."""

from __future__ import annotations

import numpy as np
import pytest



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
