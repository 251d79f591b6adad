"""The evaluation library entry point, called directly (eval.py only parses arguments into it)."""

import pytest

from bm25aug.errors import UserError
from bm25aug.eval.evaluate import METHODS, EvalConfig, evaluate


def test_evaluate_runs_a_registered_method(tiny_wp, tmp_path):
    ds, wp, _ = tiny_wp
    result = evaluate(EvalConfig(dataset=str(ds.path), method="bm25-flat", index_root=str(wp.parent)))
    metrics = result.metrics["bm25-flat"]
    assert result.split == "test" and metrics["num_queries"] == 8 and metrics["latency_ms_p50"] > 0
    assert 0.5 < metrics["ndcg@10"] <= 1.0
    assert result.summary()["method"] == "bm25-flat" and "bm25-flat" in result.table()


def test_augmented_brings_its_baselines(tiny_wp, offline_model, tmp_path):
    ds, wp, _ = tiny_wp
    offline_model.save_pretrained(tmp_path / "ckpt")
    result = evaluate(EvalConfig(dataset=str(ds.path), method="augmented", checkpoint=str(tmp_path / "ckpt"),
                                 index_root=str(wp.parent)))
    assert list(result.metrics) == ["augmented", *METHODS["augmented"].companions]
    summary = result.summary()
    assert {"latency_ms_p50_bm25_wp", "ndcg@10_bm25_wp", "ndcg@10_bm25_flat", "aug_terms_mean"} <= set(summary)


def test_unknown_method_is_a_user_error():
    with pytest.raises(UserError, match="unknown method 'bm25-magic'"):
        evaluate(EvalConfig(dataset="scifact", method="bm25-magic"))


def test_remove_query_drops_the_query_document(tmp_path):
    """ArguAna/Quora style: a query is also a document; Pyserini's BEIR runs drop that hit."""
    from conftest import TINY_DOCS, write_beir

    from bm25aug.data.registry import REGISTRY

    queries = {"d1": TINY_DOCS["d1"][1], "d3": TINY_DOCS["d3"][1]}
    root = write_beir(tmp_path / "argu", queries=queries)  # qrels: d1 -> d1, d3 -> d3, so rewrite them
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nd1\td2\t1\nd3\td1\t1\n")
    runs = {}
    for flag in (False, True):
        result = evaluate(EvalConfig(dataset=str(root), method="bm25-flat", remove_query=flag,
                                     index_root=str(tmp_path / "idx")))
        runs[flag] = result.runs["bm25-flat"]
        assert result.summary()["remove_query"] is flag
    assert all(run[0].docid == qid for qid, run in runs[False].items())  # the query finds itself first
    assert all(h.docid != qid for qid, run in runs[True].items() for h in run)
    assert all(runs[True][q] == [h for h in runs[False][q] if h.docid != q] for q in queries)
    assert REGISTRY["arguana"].remove_query and REGISTRY["quora"].remove_query and not REGISTRY["scifact"].remove_query


def test_rm3_needs_document_vectors(tmp_path):
    """A flat index without stored document vectors, or no index at all: one line naming the fix,
    not a traceback."""
    from test_stock_index import pyserini_index

    from bm25aug.search.peers import ExpansionSearcher

    with pytest.raises(UserError, match="storeDocvectors"):
        ExpansionSearcher(pyserini_index(tmp_path / "stock.flat"), "rm3")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a Lucene index"):
        ExpansionSearcher(tmp_path / "empty", "rm3")
