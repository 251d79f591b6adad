import json
import logging

import pytest

from bm25aug.data.registry import detect_layout, load_dataset
from bm25aug.errors import UserError


def test_beir_layout_any_name(tiny_beir):
    ds = load_dataset(str(tiny_beir))
    assert ds.layout == "beir" and len(ds.corpus) == 8
    assert ds.corpus["d1"].contents == "Cats The cat sat on the mat and purred."
    test = ds.split("test")
    assert test.queries["q2"] == "dog barking" and test.qrels["q2"] == {"d2": 1}


def test_name_resolves_from_data_dir(tiny_beir):
    ds = load_dataset("tiny", data_dir=tiny_beir.parent)
    assert ds.name == "tiny" and ds.path == tiny_beir


def test_malformed_corpus_line_names_line(tiny_beir):
    with open(tiny_beir / "corpus.jsonl", "a") as f:
        f.write("{not json\n")
    with pytest.raises(UserError, match=r"corpus.jsonl:9: malformed JSON"):
        _ = load_dataset(str(tiny_beir)).corpus


@pytest.mark.parametrize("lines,warning,dropped", [
    # out of training, still scored (issue 28; tests/test_evaluation.py)
    ("q1\tnope1\t1\nq2\tnope2\t1\n", "2 judgements of 2 queries name documents absent from the corpus",
     lambda split: "nope1" not in split.qrels["q1"] and split.judged_qrels["q1"]["nope1"] == 1),
    # a judged query without a text would be scored 0 and still counted (issue 10)
    ("q99\td1\t1\n", "1 judged queries are not in the queries file",
     lambda split: "q99" not in split.qrels and len(split.qrels) == 8),
])
def test_qrels_naming_unknown_docs_or_queries_warn_with_count(tiny_beir, caplog, lines, warning, dropped):
    with open(tiny_beir / "qrels" / "test.tsv", "a") as f:
        f.write(lines)
    with caplog.at_level(logging.WARNING):
        split = load_dataset(str(tiny_beir)).split("test")
    assert warning in caplog.text and dropped(split)


def test_unknown_dataset_and_missing_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BM25AUG_DATA_DIR", str(tmp_path))
    with pytest.raises(UserError, match="unknown dataset 'nosuch'"):
        load_dataset("nosuch")
    with pytest.raises(UserError, match="not found in"):
        load_dataset("squad", download=False)


def test_offline_download_failure_says_where_to_put_files(tmp_path, monkeypatch):
    import bm25aug.data.registry as data

    monkeypatch.setattr(data, "CACHE_DIR", tmp_path / "cache")

    def offline(*a, **k):
        raise OSError("network unreachable")

    monkeypatch.setattr(data.urllib.request, "urlopen", offline)
    with pytest.raises(UserError, match=r"biencoder-nq-train.json.gz.*into .*cache/nq"):
        load_dataset("nq", data_dir=tmp_path)
    assert not (tmp_path / "cache" / "nq").exists()  # nothing half-written


def test_dpr_layout(tmp_path):
    root = tmp_path / "myqa"
    root.mkdir()
    (root / "passages.tsv").write_text("id\ttext\ttitle\np1\tParis is the capital of France.\tParis\n"
                                       "p2\tBerlin is in Germany.\tBerlin\n")
    (root / "test.qa.tsv").write_text("capital of france?\t['Paris']\n")
    (root / "train.json").write_text(json.dumps([{"question": "where is berlin", "answers": ["Germany"],
                                                  "positive_ctxs": [{"passage_id": "p2", "title": "Berlin", "text": "x"}],
                                                  "negative_ctxs": [], "hard_negative_ctxs": []}]))
    ds = load_dataset(str(root))
    assert detect_layout(root) == "dpr" and ds.is_qa
    assert ds.corpus["p1"].title == "Paris"
    assert ds.split("test").answers["test-0"] == ["Paris"]
    train = ds.split("train")
    assert train.qrels["train-0"] == {"p2": 1} and train.answers["train-0"] == ["Germany"]


def test_msmarco_layout(tmp_path):
    root = tmp_path / "mm"
    root.mkdir()
    (root / "collection.tsv").write_text("0\tfirst passage\n1\tsecond passage\n")
    (root / "queries.dev.tsv").write_text("7\twhat is second\n8\tunjudged\n")
    (root / "qrels.dev.tsv").write_text("7\t0\t1\t1\n")
    ds = load_dataset(str(root))
    assert ds.layout == "msmarco" and ds.corpus["1"].text == "second passage"
    dev = ds.split("dev")
    assert dev.queries == {"7": "what is second"} and dev.qrels == {"7": {"1": 1}}


def test_seeded_dev_slice_is_reproducible(tiny_beir):
    ds = load_dataset(str(tiny_beir))
    a = ds.train_dev(dev_size=2, seed=1)
    b = load_dataset(str(tiny_beir)).train_dev(dev_size=2, seed=1)
    assert sorted(a[1].queries) == sorted(b[1].queries) and len(a[1].queries) == 1
    assert not set(a[0].queries) & set(a[1].queries)
