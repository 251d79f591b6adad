import math

import pytest

from bm25aug.data.corpus import Document
from bm25aug.eval.metrics import capped_recall, evaluate_answers, evaluate_qrels, has_answer
from bm25aug.search.bm25 import Hit


def hits(*docids):
    return [Hit(d, float(100 - i)) for i, d in enumerate(docids)]


def test_qrels_metrics_by_hand():
    qrels = {"q1": {"a": 1, "b": 1}, "q2": {"c": 2}}
    run = {"q1": hits("x", "a", "y", "b"), "q2": hits("z", "w", "c")}
    m = evaluate_qrels(run, qrels)
    ideal1 = 1 + 1 / math.log2(3)
    ndcg1 = (1 / math.log2(3) + 1 / math.log2(5)) / ideal1
    ndcg2 = (2 / math.log2(4)) / 2
    assert m["ndcg@10"] == pytest.approx((ndcg1 + ndcg2) / 2, abs=1e-6)
    assert m["mrr@10"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert m["recall@100"] == pytest.approx(1.0)
    assert m["map"] == pytest.approx(((1 / 2 + 2 / 4) / 2 + 1 / 3) / 2)
    assert m["num_queries"] == 2


def test_query_without_hits_counts_as_zero():
    m = evaluate_qrels({"q1": hits("a")}, {"q1": {"a": 1}, "q2": {"b": 1}})
    assert m["ndcg@10"] == pytest.approx(0.5) and m["num_queries"] == 2


def test_mrr_cut_at_10():
    run = {"q": hits(*[f"n{i}" for i in range(10)], "rel")}
    assert evaluate_qrels(run, {"q": {"rel": 1}})["mrr@10"] == 0.0


def test_capped_recall_more_relevant_than_k():
    rels = {f"r{i}": 1 for i in range(5)}
    ranked = hits("r0", "x", "r1")
    assert capped_recall(ranked, rels, k=3) == pytest.approx(2 / 3)  # BEIR: / min(k, |rel|)
    assert capped_recall(ranked, rels, k=10) == pytest.approx(2 / 5)
    m = evaluate_qrels({"q": hits("r0", "r1", *[f"x{i}" for i in range(200)])}, {"q": {f"r{i}": 1 for i in range(150)}})
    assert m["recall_cap@100"] == pytest.approx(2 / 100) and m["recall@100"] == pytest.approx(2 / 150)


def test_has_answer_case_accents_punctuation():
    assert has_answer(["denver broncos"], "The Denver Broncos, champions!")
    assert has_answer(["Beyoncé"], "Beyonce\u0301 sang")  # composed vs decomposed: same after NFD
    assert not has_answer(["Beyonce"], "Beyoncé sang")  # DPR keeps accents: no match
    assert has_answer(["U.S."], "the U.S. army")
    assert not has_answer(["cat"], "concatenate")  # token match, not substring
    assert not has_answer([""], "anything")


def test_answer_accuracy_at_k():
    corpus = {"p1": Document("", "nothing here"), "p2": Document("", "Paris is in France"),
              "p3": Document("", "nothing either")}
    run = {"q1": hits("p1", "p2"), "q2": hits("p3", "p1")}
    m = evaluate_answers(run, {"q1": ["paris"], "q2": ["London"]}, corpus, ks=(1, 2))
    assert m["acc@1"] == 0.0 and m["acc@2"] == 0.5 and m["num_queries"] == 2
