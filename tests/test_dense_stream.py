"""Streamed corpus embeddings (``bm25aug.dense.embeddings``): chunks written to one mapped ``.npy``
file in external-id order and scored a block at a time, so that memory does not grow with the
corpus; exact search ranks as the permuted in-memory copy did; an interrupted encoding resumes.

The encoder is ``Hashed``: a real ``DenseModel`` (the protocol) whose unit vectors are drawn from a
seed of each text's hash, so a corpus of thousands encodes in a moment."""

from __future__ import annotations

import hashlib
import io
import random
import tracemalloc

import numpy as np
import pytest

from conftest import Counting, Interrupted, write_beir

WORDS = "cat dog lion river forest rain heart blood cell gene virus drug music song ship ocean bread wine".split()


class Hashed:
    """A ``DenseModel``: each text's unit vector drawn from its hash (``table``: texts given their own
    vector). ``dim`` and ``name`` set its digest, so two of them are two models."""

    def __init__(self, dim: int = 384, name: str = "hashed", table: dict[str, np.ndarray] | None = None):
        self.name, self.dim, self.table = name, dim, table or {}
        self.digest = hashlib.blake2b(f"{name}/{dim}".encode(), digest_size=16).hexdigest()

    def vector(self, text: str) -> np.ndarray:
        if text in self.table:
            return np.asarray(self.table[text], np.float32)
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        return v / np.linalg.norm(v)

    @property
    def corpus_encoder(self) -> "Hashed":
        return self

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        return self.encode_queries(texts)


def make_index(root, n: int, seed: int = 3, duplicates: int = 0):
    """A generated corpus of ``n`` documents (the last ``duplicates`` repeat earlier ones' text,
    so their vectors tie) and its flat index (a ``LuceneIndex``)."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index
    from bm25aug.lucene.reader import LuceneIndex

    rng, docs = random.Random(seed), {}
    for i in range(n - duplicates):
        docs[f"d{i:06d}"] = ("", f"doc {i} " + " ".join(rng.choice(WORDS) for _ in range(5)))
    for i in range(duplicates):
        docs[f"e{i:06d}"] = docs[f"d{i:06d}"]
    ds = load_dataset(str(write_beir(root / "gen", docs=docs, queries={"q0": "cat"}, splits=("test",))))
    return ds, LuceneIndex(ensure_index(ds, "flat", root / "indexes"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr("bm25aug.dense.embeddings.CACHE_ROOT", tmp_path / "cache")
    return tmp_path / "cache" / "dense"


def by_rule(scores: np.ndarray, k: int):
    """Exact search's rule, in plain Python: best score first, ties by doc number. (The search of
    before took an argpartition's pick among the documents tied at the k-th place.)"""
    best = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
    return np.asarray(best), scores[best]


@pytest.mark.parametrize("n", [256, 250])
def test_exact_search_ranks_and_scores_as_the_permuted_copy_did(tmp_path, cache, n):
    """256 documents: every score and every ranking is the permuted copy's, bit for bit. 250: BLAS
    scored the copy's last partial group of rows another way (a rounding off, so a document tied with
    its own duplicate by a rounding); the mapped rows never land there, and equal vectors tie."""
    from bm25aug.dense.embeddings import PAD
    from bm25aug.search.dense import DenseSearcher

    _, index = make_index(tmp_path, n, duplicates=12)
    searcher = DenseSearcher(index, Hashed(), search="exact")
    assert searcher.search_kind == "exact" and searcher.embeddings.shape == (n, 384)
    copy = np.asarray(searcher.embeddings)  # what corpus_embeddings handed out before: vectors[id_rank]
    for row in (0, 7, n - 1):
        assert np.array_equal(copy[row], searcher.model.vector(_contents(index, row)))
    exact = np.ones(n, bool)
    exact[n - n % PAD:] = False  # the copy's last partial group
    queries = [f"query {i}" for i in range(20)] + [_contents(index, row) for row in range(5)]
    for query in queries:
        vector = searcher.model.encode_queries([query])[0]
        new, old = searcher.embeddings @ vector, copy @ vector
        assert np.array_equal(new[exact], old[exact])
        np.testing.assert_allclose(new, old, rtol=0, atol=1e-6)
        assert same(searcher.search_arrays(query, 30), searcher.embeddings.top(vector, 30))
        top = searcher.search_arrays(query, 30)
        ids, scores = by_rule(old if n % PAD == 0 else new, 30)
        assert top.lucene_ids.tolist() == ids.tolist() and np.array_equal(top.scores, scores)
    # a duplicated document's text: its two copies tie, ordered by doc number
    twins = sorted(index.doc_numbers(["d000003", "e000003"]).tolist())
    top = searcher.search_arrays(_contents(index, twins[0]), 2)
    assert top.scores[0] == top.scores[1] and top.lucene_ids.tolist() == twins
    batch = searcher.batch_search_arrays(queries, 30, threads=2)
    assert all(same(a, searcher.search_arrays(q, 30)) for a, q in zip(batch, queries))


def same(a, b) -> bool:
    """Two ``TopK`` equal: the same doc numbers with the same scores, bit for bit."""
    return a.lucene_ids.tolist() == b.lucene_ids.tolist() and np.array_equal(a.scores, b.scores)


def _contents(index, row: int) -> str:
    from bm25aug.dense.embeddings import contents_text

    return contents_text(index.stored([row])[0])


def peak_bytes(index, model) -> int:
    """Python's peak allocation while ``index`` is encoded, opened and searched (tracemalloc)."""
    from bm25aug.search.dense import DenseSearcher

    tracemalloc.start()
    try:
        searcher = DenseSearcher(index, model, search="exact")
        searcher.batch_search_arrays([f"query {i}" for i in range(4)], 100)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_corpus(tmp_path, cache):
    from bm25aug.dense import embeddings

    small, large = 3000, 12000  # both past the checksum's 4 MiB reads: 4.4 and 17.6 MiB of embeddings
    peaks = {}
    for n in (small, large):
        _, index = make_index(tmp_path / str(n), n)
        peaks[n] = peak_bytes(index, Hashed())
        # independent of the corpus: a chunk, a scoring block, and the cache's checksum, which reads the
        # file 4 MiB at a time (bm25aug.io.digest: two such reads alive at once, 8 MiB)
        assert peaks[n] < 10 * 2**20, peaks
    whole = large * 384 * 4  # the large corpus's embeddings, never held
    assert peaks[large] < whole and peaks[large] - peaks[small] < 0.05 * whole, peaks
    assert embeddings.SCORE_ROWS * 4 < 2**20


def test_an_interrupted_encoding_resumes_and_writes_the_format_of_before(tmp_path, cache, monkeypatch):
    from bm25aug.dense import embeddings

    _, index = make_index(tmp_path, 700)
    with pytest.raises(Interrupted):
        embeddings.corpus_embeddings(index, Counting(Hashed(), fail_after=2), chunk=100)
    (partial,) = [p for p in cache.iterdir() if p.name.endswith(".partial")]
    assert sorted(p.name for p in partial.iterdir()) == ["chunk-000000000.npz", "chunk-000000100.npz", "plan.json"]
    resumed = Counting(Hashed())
    rows, _ = embeddings.corpus_embeddings(index, resumed, chunk=100)
    assert resumed.documents == 500 and not partial.exists()
    assert isinstance(rows.vectors, np.memmap)  # mapped, not read
    monkeypatch.setattr(embeddings, "CACHE_ROOT", tmp_path / "uninterrupted")
    whole, _ = embeddings.corpus_embeddings(index, Hashed(), chunk=100)
    assert np.array_equal(np.asarray(rows), np.asarray(whole))
    for row in (0, 350, 699):
        assert np.array_equal(rows[row], Hashed().vector(_contents(index, row)))
    # the file is what np.save wrote before (external-id order): caches of before are read as they are
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    saved = io.BytesIO()
    np.save(saved, np.asarray(whole.vectors))
    assert (folder / embeddings.EMBEDDINGS).read_bytes() == saved.getvalue()
    again = Counting(Hashed())
    embeddings.corpus_embeddings(index, again, chunk=100)
    assert again.documents == 0


class Split:
    """A model whose corpus is encoded by another (``Encoder.corpus_encoder``), as the default
    ``SplitPrecision`` is: queries by ``queries``, documents by ``documents``."""

    def __init__(self, queries, documents):
        self.queries, self.documents, self.dim = queries, documents, documents.dim
        self.name, self.digest = "split", hashlib.blake2b(b"split", digest_size=16).hexdigest()

    @property
    def corpus_encoder(self):
        return self.documents

    def encode_queries(self, texts):
        return self.queries.encode_queries(texts)

    def encode_documents(self, texts):
        return self.documents.encode_documents(texts)


def test_a_split_model_searches_its_document_encoders_cache_with_its_own_query_vectors(tmp_path, cache):
    """The corpus cache and the HNSW index's key and record are the document encoder's: a split
    model reuses the embeddings its document export made alone (nothing encoded again), and its
    queries are its query encoder's."""
    from bm25aug.dense import embeddings, hnsw
    from bm25aug.search.dense import DenseSearcher

    _, index = make_index(tmp_path, 300)
    documents, queries = Counting(Hashed(name="documents")), Hashed(name="queries")
    alone = DenseSearcher(index, documents, search="exact")
    assert documents.documents == 300
    split = DenseSearcher(index, Split(queries, documents), search="exact")
    assert documents.documents == 300 and len([p for p in cache.iterdir() if p.is_dir()]) == 1
    assert np.array_equal(np.asarray(split.embeddings), np.asarray(alone.embeddings))
    assert hnsw.default_folder(index, split.model) == hnsw.default_folder(index, documents)
    assert hnsw.expected_record(index, split.model) == hnsw.expected_record(index, documents)
    query = "a query of words"
    expected = embeddings.top_rows(np.asarray(alone.embeddings) @ queries.vector(query), 10)
    assert same(split.search_arrays(query, 10), expected)
