"""The HNSW index of a corpus's embeddings (``bm25aug.dense.hnsw``): built by Anserini's
``IndexHnswDenseVectors`` and searched by its ``HnswDenseSearcher`` (the real path, through the
jar), checked against exact search (recall, and equal runs where the graph finds exact search's
documents, ties included), chosen by ``DenseSearcher``'s ``search``, and refused in one line when
it belongs to another corpus or model. Vectors: ``Hashed`` (tests/test_dense_stream.py), 32
dimensions, on a generated corpus of 600 documents, 20 of them duplicates (their vectors tie)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bm25aug.errors import UserError
from test_dense_stream import Hashed, make_index, same

N, DIM = 600, 32


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The corpus, its exact searcher and its HNSW index (built once, in a temporary cache)."""
    from bm25aug.dense import embeddings, hnsw
    from bm25aug.search.dense import DenseSearcher

    root = tmp_path_factory.mktemp("hnsw")
    saved, embeddings.CACHE_ROOT = embeddings.CACHE_ROOT, root / "cache"
    _, index = make_index(root, N, duplicates=20)
    model = Hashed(DIM)
    exact = DenseSearcher(index, model)
    assert exact.search_kind == "exact"  # auto, below EXACT_BELOW, before any HNSW index exists
    folder = hnsw.build_hnsw(index, model, exact.embeddings)
    yield index, model, exact, folder
    embeddings.CACHE_ROOT = saved


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text and "; fix: " in text
    return text


def test_the_index_is_anserinis_and_records_its_corpus_and_model(built):
    from bm25aug.dense import hnsw
    from bm25aug.dense.corpus_cache import corpus_identity

    index, model, _, folder = built
    assert folder == hnsw.default_folder(index, model) and folder.parent.name == hnsw.HNSW
    record = json.loads((folder / hnsw.RECORD).read_text())
    assert record["corpus"] == corpus_identity(index) and record["model_digest"] == model.digest
    assert (record["documents"], record["M"], record["efC"]) == (N, hnsw.M, hnsw.EF_CONSTRUCTION)
    assert any(p.name.startswith("segments_") for p in folder.iterdir())  # a Lucene index, built by Anserini
    assert hnsw.build_hnsw(index, model, out=folder) == folder  # built once: the record matches


def test_hnsw_finds_what_exact_search_finds(built, monkeypatch):
    from bm25aug.dense import hnsw
    from bm25aug.search.dense import DenseSearcher

    index, model, exact, folder = built
    monkeypatch.setattr(hnsw, "EF_SEARCH", 100)  # a real graph search: 100 candidates of 600, not all
    assert DenseSearcher(index, model).search_kind == "exact"  # auto, below EXACT_BELOW: exact though the index exists
    approximate = DenseSearcher(index, model, search="hnsw")
    assert approximate.search_kind == "hnsw"
    queries = [f"query {i}" for i in range(60)]
    for k, floor in ((10, 0.95), (100, 0.95)):
        found = [len(set(h.lucene_ids.tolist()) & set(e.lucene_ids.tolist())) / k for h, e in zip(
            approximate.batch_search_arrays(queries, k), exact.batch_search_arrays(queries, k))]
        assert np.mean(found) >= floor, (k, np.mean(found))
    for query in queries:
        got, want = approximate.search_arrays(query, 10), exact.search_arrays(query, 10)
        if set(got.lucene_ids.tolist()) == set(want.lucene_ids.tolist()):
            assert same(got, want)  # rescored exactly: the same order and scores, bit for bit
    # a duplicated document's own text: both copies first, tied, by doc number, as exact search has them
    twins = sorted(index.doc_numbers(["d000004", "e000004"]).tolist())
    text = exact.model.encode_queries  # the text's vector is the documents' own
    from test_dense_stream import _contents

    vector = text([_contents(index, twins[0])])[0]
    got = approximate.hnsw.search(vector, 5)
    assert got.lucene_ids[:2].tolist() == twins and got.scores[0] == got.scores[1]
    assert same(got, exact.top(vector, 5))
    # deeper than the graph keeps: exact search, the same run as exact's
    assert same(approximate.search_arrays(queries[0], 101), exact.search_arrays(queries[0], 101))
    # one thread or two: the same runs
    assert all(same(a, b) for a, b in zip(approximate.batch_search_arrays(queries, 20, threads=1),
                                          approximate.batch_search_arrays(queries, 20, threads=2)))


def test_the_search_is_chosen_and_a_foreign_index_refused(built, tmp_path, monkeypatch):
    from bm25aug.dense import embeddings, hnsw
    from bm25aug.search.dense import DenseSearcher

    index, model, exact, folder = built
    assert DenseSearcher(index, model, search="exact").search_kind == "exact"
    assert DenseSearcher(index, model, search=folder).search_kind == "hnsw"
    # another model's embeddings, another corpus: one line each, naming the problem and the fix
    with pytest.raises(UserError) as error:
        hnsw.HnswIndex(folder, index, Hashed(DIM, name="other"), exact.embeddings)
    assert "indexes hashed embeddings" in one_line(error)
    _, other = make_index(tmp_path / "other", 50, seed=9)
    with pytest.raises(UserError) as error:
        DenseSearcher(other, model, search=folder)
    assert "another corpus" in one_line(error)
    with pytest.raises(UserError) as error:
        DenseSearcher(index, model, search=tmp_path)
    assert "none of auto, exact, hnsw" in one_line(error)
    # from EXACT_BELOW documents, auto builds the index first (here in a fresh cache)
    monkeypatch.setattr(embeddings, "CACHE_ROOT", tmp_path / "fresh")
    monkeypatch.setattr(hnsw, "EXACT_BELOW", 50)
    large = DenseSearcher(other, model)
    assert large.search_kind == "hnsw" and (hnsw.default_folder(other, model) / hnsw.RECORD).is_file()
    assert same(large.search_arrays("query 1", 10), DenseSearcher(other, model, search="exact").search_arrays(
        "query 1", 10))
