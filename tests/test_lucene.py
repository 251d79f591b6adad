"""The fast hit path (bm25aug.lucene.reader) against Pyserini's own searcher: same hits, scores, order."""

import random

import numpy as np
import pytest

from bm25aug.data.registry import load_dataset
from bm25aug.lucene.index import ensure_index
from bm25aug.ranking import PAIRS, anserini_scores, anserini_top
from bm25aug.lucene.term_query import query_syntax
from bm25aug.search.bm25 import BM25Searcher
from conftest import write_beir
from test_export import plain_pyserini_search


def pyserini_hits(index_dir, query: str, k: int):
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(index_dir))
    searcher.set_bm25(0.9, 0.4)
    return [(h.docid, h.score) for h in searcher.search(query, k)]


def test_ties_across_the_kth_place_go_to_the_smaller_external_id(tmp_path, monkeypatch):
    """150 identical documents indexed in shuffled id order: every k must cut the tie by id, as
    Anserini's sorted search does, and the scores must carry its 1e-6 tie perturbation. A tie
    longer than the hits fetched past k makes batch search search again, deeper, on the Java pool:
    on 1 and 2 threads it must give what one query at a time gives."""
    from bm25aug.lucene import batch as java_batch

    deeper = []
    plain = java_batch.JavaBatch

    def counting(*args, **kw):
        deeper.append(kw.get("deeper", False))
        return plain(*args, **kw)

    monkeypatch.setattr(java_batch, "JavaBatch", counting)
    ids = [f"doc{i:03d}" for i in range(150)]
    random.Random(0).shuffle(ids)
    docs = {d: ("Fruit", "apple banana cherry") for d in ids} | {"other": ("Veg", "apple carrot")}
    root = write_beir(tmp_path / "ties", docs=docs, queries={"q1": "apple"}, splits=("test",))
    flat = ensure_index(load_dataset(str(root)), "flat", tmp_path / "idx")
    ours = BM25Searcher(flat)
    for k in (1, 5, 17, 31, 100, 151):
        assert [(h.docid, h.score) for h in ours.search("apple banana", k)] == pyserini_hits(flat, "apple banana", k)
        assert [(h.docid, h.score) for h in ours.search("apple", k)] == pyserini_hits(flat, "apple", k)
        for threads in (1, 2):
            batch = ours.batch_search(["apple banana", "apple"], ["a", "b"], k, threads=threads)
            assert [[(h.docid, h.score) for h in hits] for hits in batch.values()] == [
                pyserini_hits(flat, "apple banana", k), pyserini_hits(flat, "apple", k)]
    assert any(deeper), "no batch searched a long tie again, deeper"
    made = dict(ours.index.batch_functions)  # one search Function per kind and depth, made once
    ours.batch_search(["apple banana", "apple"], ["a", "b"], 5, threads=2)
    assert ours.index.batch_functions == made and all(n <= 151 for _, n in made)


def test_weighted_terms_are_not_parsed_as_operators(tiny_wp):
    """Punctuation WordPieces, ## pieces, keywords and fractional boosts reach Lucene verbatim."""
    _, wp, _ = tiny_wp
    searcher = BM25Searcher(wp)
    terms = {".": 0.3, ",": 1.7, "##rred": 0.123456789, "cat": 2.0, "the": 1e-7, "and": 0.5}
    ours = [(h.docid, h.score) for h in searcher.search_terms(terms, 8)]
    assert ours == plain_pyserini_search(wp, terms, 8)
    assert query_syntax({"a:b": 1.0, "AND": 2.0, "(x)": 0.5}) == "a\\:b^1 \\AND^2 \\(x\\)^0.5"
    assert query_syntax({"cat": 0.1}) == "cat^0.1" and query_syntax({"cat": 0.0}) == ""


def test_score_rounding_matches_anserini_on_handmade_ties():
    raw = np.float32([8.57529, 8.57531, 8.5753, 7.0, 7.0, 7.00004, 6.99996, 6.9999, 1e-5])
    got = anserini_scores(raw)
    # Rounded to 4 decimals, then each further member of a run of (near-)ties lowered by 1e-6 more.
    expected = np.float32([8.5753, 8.5753 - 1e-6, 8.5753 - 2e-6, 7.0, 7.0 - 1e-6, 7.0 - 2e-6, 7.0 - 3e-6,
                           np.float32(6.9999) - np.float32(4e-6), 0.0])
    assert got.dtype == np.float32 and np.allclose(got, expected, rtol=0, atol=2e-7)
    # A gap of exactly 1e-4 in float32 still ties (Anserini resets only on a gap above 1e-4).
    assert np.float32(1e-4) - np.float32(0) == np.float32(1e-4)
    assert np.array_equal(anserini_scores(np.float32([1e-4, 0.0])), np.float32([1e-4, -1e-6]))


def _ties_adjusted_one_by_one(raw: np.ndarray) -> np.ndarray:
    """Anserini's ScoreTiesAdjusterReranker as written: every hit, in order, in float32."""
    scores = (np.floor(raw.astype(np.float64) * 10000.0 + 0.5) / 10000.0).astype(np.float32)
    dup = 0
    for i in range(1, scores.size):
        if scores[i - 1] - scores[i] > np.float32(1e-4):
            dup = 0
        else:
            dup += 1
            scores[i] = scores[i] - np.float32(1e-6) * np.float32(dup)
    return scores


def test_a_batch_of_queries_is_ranked_as_each_alone():
    """``anserini_top`` over several queries' hits at once (runs of ties never crossing two
    queries, empty ones between) equals ranking each query alone, as Anserini does hit by hit."""
    rng = np.random.default_rng(1)
    id_rank = rng.permutation(5000)
    results, alone = [], []
    for n in (0, 1, 40, 0, 1016, 300, 2):
        raw = np.sort(np.float32(np.round(rng.uniform(0, 3, n), 3)))[::-1]  # many equal scores, and 1e-4 gaps
        pairs = np.zeros(n, PAIRS)
        pairs["doc"], pairs["score"] = rng.choice(5000, n, replace=False), raw
        pairs = pairs[np.lexsort((pairs["doc"], -pairs["score"].astype(np.float32)))]  # Lucene's order
        results.append(pairs)
        for k in (1, 25, 1000):
            docs = pairs["doc"].astype(np.int64)
            order = sorted(range(n), key=lambda i: (-float(pairs["score"][i]), id_rank[docs[i]]))[:k]
            alone.append((k, docs[order], _ties_adjusted_one_by_one(pairs["score"].astype(np.float32)[order])))
    got = [top for k in (1, 25, 1000) for top in anserini_top(results, k, id_rank)]
    expected = sorted(alone, key=lambda e: e[0])
    for top, (k, docs, scores) in zip(got, expected):
        assert np.array_equal(top.lucene_ids, docs) and np.array_equal(top.scores, scores), k


def test_a_long_chain_of_ties_is_walked_hit_by_hit():
    """120 equal scores then 2e-4 steps: each step ties only through the lowering before it, so
    the fixed point would grow one hit a round; past its rounds the query is walked hit by hit,
    while the other query of the batch keeps its vectorized scores."""
    chain = np.float32(np.r_[np.full(120, 20.0), 20.0 - 2e-4 * np.arange(1, 881)])
    other = np.float32([5.0, 5.0, 4.9999, 3.0])
    first = np.zeros(chain.size + other.size, bool)
    first[[0, chain.size]] = True
    got = anserini_scores(np.concatenate([chain, other]), first)
    assert np.array_equal(got, np.concatenate([_ties_adjusted_one_by_one(chain), _ties_adjusted_one_by_one(other)]))


def test_score_rounding_equals_the_hit_by_hit_rule():
    """On long runs of equal and 1e-4-apart scores (runs past 100, where a 2e-4 gap still ties)
    ``anserini_scores`` equals the hit-by-hit loop."""
    rng = np.random.default_rng(0)
    for n in (2, 10, 300, 1016, 3000):
        batch = []
        for _ in range(20):
            # Runs of ~100 scores 0 or 1e-4 apart, then a step of 2e-4, 3e-4 or 5e-3.
            inside = rng.choice([0, 0, 0, 0, 1], size=n)
            steps = np.where(rng.random(n) < 0.01, rng.choice([2, 3, 50], size=n), inside) * 1e-4
            raw = np.float32(rng.uniform(0.5, 30.0) - np.cumsum(steps + rng.uniform(0, 2e-6, size=n)))
            assert np.array_equal(anserini_scores(raw), _ties_adjusted_one_by_one(raw))
            batch.append(raw)
        # The same queries in one batch: a run of ties never reaches into the next query.
        first = np.zeros(n * len(batch), bool)
        first[::n] = True
        expected = np.concatenate([_ties_adjusted_one_by_one(raw) for raw in batch])
        assert np.array_equal(anserini_scores(np.concatenate(batch), first), expected)


@pytest.mark.parametrize("flavor", ["wp", "flat"])
def test_scifact_every_hit_equals_pyserini(scifact, scifact_wp, flavor):
    """All 300 test queries, 1000 hits each: identical (docid, score) lists."""
    index = scifact_wp if flavor == "wp" else ensure_index(scifact, "flat")
    ours = BM25Searcher(index)
    from pyserini.search.lucene import LuceneSearcher

    theirs = LuceneSearcher(str(index))
    theirs.set_bm25(0.9, 0.4)
    queries = list(scifact.split("test").queries.values())
    batch = ours.batch_search(queries, [str(i) for i in range(len(queries))], 1000, threads=2)
    for i, query in enumerate(queries):
        got = [(h.docid, h.score) for h in ours.search(query, 1000)]
        if flavor == "wp":
            assert got == plain_pyserini_search(index, ours.query_terms(query), 1000), query
        else:
            assert got == [(h.docid, h.score) for h in theirs.search(query, 1000)], query
        assert [(h.docid, h.score) for h in batch[str(i)]] == got, query  # the Java pool: the same hits


def test_query_terms_are_never_truncated_by_the_model_tokenizer(tiny_wp, offline_model):
    """The searcher shares the model's tokenizer, whose truncating calls switch truncation on in the backend."""
    _, wp, _ = tiny_wp
    searcher = BM25Searcher(wp, tokenizer=offline_model.tokenizer)
    long_query = " ".join(f"word{i}" for i in range(300))
    # An HF tokenizer call with truncation (as a user's own code may make) leaves it set in the backend.
    offline_model.tokenizer([long_query], truncation=True, max_length=offline_model.config.max_query_length)
    assert sum(searcher.query_terms(long_query).values()) > 300
    # Our untruncated tokenizing is a private copy: the backend the user's tokenizer shares keeps
    # their setting (switching it off there would race with their threads).
    assert offline_model.tokenizer.backend_tokenizer.truncation is not None


def test_the_id_table_is_written_a_slice_at_a_time(tiny_wp, tmp_path, monkeypatch):
    """A build streams its id table from the stored ids, a slice at a time (it never holds every
    id): with slices of 3, the table and the ids searched by equal the index's own."""
    import shutil

    from bm25aug.lucene import docids
    from bm25aug.lucene.reader import open_reader

    _, _, flat = tiny_wp
    copy = tmp_path / "tiny.flat"
    shutil.copytree(flat, copy)
    whole = (copy / docids.DOCIDS_FILE).read_text()
    (copy / docids.DOCIDS_FILE).unlink()
    monkeypatch.setattr(docids, "_ID_SLICE", 3)
    reader = open_reader(copy)
    try:
        docids.write_docids(copy, reader)
    finally:
        reader.close()
    assert (copy / docids.DOCIDS_FILE).read_text() == whole and len(whole.splitlines()) > 3
    assert BM25Searcher(copy).docids.tolist() == whole.splitlines()


def test_an_id_that_is_not_exactly_a_stored_id_never_matches(tiny_wp, tmp_path):
    """numpy's fixed-width strings drop trailing NULs: "d1\\x00" must not resolve to d1, and an index
    whose stored id ends in NUL keeps that id exactly (hits, lookups)."""
    from test_stock_index import pyserini_index

    _, _, flat = tiny_wp
    index = BM25Searcher(flat).index
    d1 = int(index.doc_numbers(["d1"])[0])
    assert d1 >= 0 and index.docids[d1] == "d1"
    assert index.doc_numbers(["d1\x00", "d1\x00\x00", "d1", "d9", 1]).tolist() == [-1, -1, d1, -1, -1]
    stock = pyserini_index(tmp_path / "nul.flat", ids={"d2": "d2\x00"})  # d2's text stored under "d2\x00"
    searcher = BM25Searcher(stock)
    assert searcher.search("dog barking", 1)[0].docid == "d2\x00"
    nul = int(searcher.index.doc_numbers(["d2\x00"])[0])
    assert nul >= 0 and searcher.index.doc_numbers(["d2", "d2\x00\x00"]).tolist() == [-1, -1]
    assert searcher.docids[nul] == "d2\x00" and searcher.index.doc_numbers(["d1"])[0] >= 0
