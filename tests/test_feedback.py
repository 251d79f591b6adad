"""RM3 over any first-stage query (bm25aug.search.feedback): Pyserini's RM3 exactly on a bag of
words, the same on every path (one query, a batch, two threads), and on an augmented query."""

import numpy as np
import pytest

from bm25aug.errors import UserError
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.feedback import RM3, RM3Searcher


def _queries(scifact, n):
    return list(scifact.split("test").queries.values())[:n]


def _same(a, b) -> bool:
    return np.array_equal(a.lucene_ids, b.lucene_ids) and np.array_equal(a.scores, b.scores)


def test_rm3_on_a_bag_of_words_is_pyserinis_rm3(scifact, scifact_flat):
    """Hits and (Anserini-rounded) scores equal Pyserini's set_rm3() run, query by query."""
    from bm25aug.search.peers import ExpansionSearcher

    queries = _queries(scifact, 60)
    ours = RM3Searcher(BM25Searcher(scifact_flat)).batch_search_arrays(queries, 1000)
    pyserini = ExpansionSearcher(scifact_flat, "rm3")
    differ = [q for q, top in zip(queries, ours) if not _same(top, pyserini.search_arrays(q, 1000))]
    assert not differ, f"{len(differ)} queries rank otherwise than Pyserini's RM3, e.g. {differ[0]!r}"


def test_rm3_paths_agree_and_threads_change_nothing(scifact, scifact_flat, flat_model):
    from bm25aug.search.augmented import AugmentedSearcher

    queries = _queries(scifact, 30) + ["", "   "]
    for first in (BM25Searcher(scifact_flat), AugmentedSearcher(flat_model, BM25Searcher(scifact_flat))):
        rm3 = RM3Searcher(first)
        one = [rm3.search_arrays(q, 100) for q in queries]
        for threads in (1, 2):
            assert all(map(_same, one, rm3.batch_search_arrays(queries, 100, threads=threads)))
        assert len(one[-1].lucene_ids) == 0 and len(one[-2].lucene_ids) == 0


def test_expand_interpolates_the_learned_query_with_the_feedback_model(scifact, scifact_flat, flat_model):
    """The RM3 query of an augmented term list: its own weights, L1-normalized, are the original
    part (with original_weight near 1 almost exactly them); feedback terms come from the top documents."""
    from bm25aug.search.augmented import AugmentedSearcher

    augmented = AugmentedSearcher(flat_model, BM25Searcher(scifact_flat))
    query = _queries(scifact, 1)[0]
    terms = augmented.term_list(query)
    assert any(w != 1.0 for w in terms.values()), "an augmented list has learned, not whole-count, weights"
    total = sum(terms.values())
    alone = RM3Searcher(augmented, RM3(original_weight=0.999999)).expand(terms)
    assert {t: w for t, w in alone.items() if w > 1e-5} == pytest.approx({t: w / total for t, w in terms.items()}, abs=1e-6)
    mixed = RM3Searcher(augmented).expand(terms)
    assert sum(mixed.values()) == pytest.approx(1.0, rel=1e-5)
    assert set(terms) < set(mixed) and len(set(mixed) - set(terms)) <= RM3().fb_terms
    assert RM3Searcher(augmented).expand({}) == {}


def test_rm3_settings_out_of_range_are_one_line(scifact_flat):
    with pytest.raises(UserError, match="fb_terms 0 is out of range"):
        RM3Searcher(BM25Searcher(scifact_flat), RM3(fb_terms=0))
    with pytest.raises(UserError, match="original_weight 1.5 is out of range"):
        RM3Searcher(BM25Searcher(scifact_flat), RM3(original_weight=1.5))
    with pytest.raises(UserError, match="strictly between 0 and 1"):
        RM3Searcher(BM25Searcher(scifact_flat), RM3(original_weight=1.0))


def test_rm3_needs_document_vectors(tmp_path):
    """A stock index built without -storeDocvectors: one error line, naming the fix."""
    from test_stock_index import pyserini_index

    with pytest.raises(UserError, match="stores no document vectors"):
        RM3Searcher(BM25Searcher(pyserini_index(tmp_path / "stock.flat")))
