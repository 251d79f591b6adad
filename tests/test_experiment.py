"""The evaluation library entry point, called directly (eval.py only parses arguments into it)."""

import pytest

from bm25aug.errors import UserError
from bm25aug.experiment import METHODS, EvalConfig, evaluate


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
