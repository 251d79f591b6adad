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


def test_judgements_of_absent_documents_are_scored_as_trec_eval_scores_them(tmp_path, caplog):
    """q1 judges only a document the corpus lacks, q2 one present and one absent: both stay in the
    average (num_queries = every judged query), q1 scores 0, and q2's ideal DCG counts the absent
    document, exactly as pytrec_eval (trec_eval) over the file's own qrels; training never sees them."""
    import pytrec_eval

    from bm25aug.data.registry import load_dataset
    from bm25aug.eval.metrics import evaluate_split
    from conftest import write_beir

    root = write_beir(tmp_path / "tiny", queries={"q1": "cat on a mat", "q2": "dog barking", "q3": "pasta sauce"},
                      splits=("test",))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tgone1\t1\nq2\td2\t1\nq2\tgone2\t2\n"
                                             "q3\td5\t1\n")
    split = load_dataset(str(root)).split("test")
    assert "2 judgements of 2 queries name documents absent from the corpus" in caplog.text
    assert split.qrels == {"q1": {}, "q2": {"d2": 1}, "q3": {"d5": 1}}  # what training reads
    run = {"q1": [Hit("d1", 3.0)], "q2": [Hit("d2", 2.0), Hit("d7", 1.0)], "q3": [Hit("d5", 1.0)]}
    metrics = evaluate_split(run, split, {})
    assert metrics["num_queries"] == 3
    full = {"q1": {"gone1": 1}, "q2": {"d2": 1, "gone2": 2}, "q3": {"d5": 1}}
    expected = pytrec_eval.RelevanceEvaluator(full, {"ndcg_cut.10"}).evaluate(
        {q: {h.docid: h.score for h in hits} for q, hits in run.items()})
    assert expected["q1"]["ndcg_cut_10"] == 0.0 and 0 < expected["q2"]["ndcg_cut_10"] < 1
    assert metrics["ndcg@10"] == pytest.approx(sum(v["ndcg_cut_10"] for v in expected.values()) / 3)
