"""The second hostile-user probe (issue 29), one section per class of harm. Each test failed on
the release before the fix: outputs that overwrote inputs, cached files and indexes trusted
blindly, values the JVM or pytrec_eval misread, signals that skipped every cleanup."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.lucene.index import ensure_index
from conftest import TINY_DOCS, write_beir
from test_reliability import ROOT, run_cli, snapshot
from test_stock_index import pyserini_index

DEAD_PID = 2**22 + 12345  # above pid_max, so no process has it


def one_line_error(out, message: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and message in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: "), out.stderr


def tiny_train_config(run: Path, **overrides):
    from bm25aug.train.arguments import TrainConfig

    settings = dict(dataset="tiny", output_dir=str(run), batch_size=4, dev_size=2, negative_depth=3, threads=1,
                    epochs=1, significance=0, gate_quantile=0)
    return TrainConfig(**{**settings, **overrides})


# ---------------------------------------------------------------------------- 1. outputs never overwrite inputs
def test_eval_output_naming_the_qrels_is_refused(tmp_path):
    root = write_beir(tmp_path / "tiny")
    qrels = root / "qrels" / "test.tsv"
    before = qrels.read_bytes()
    for args, message in ((["--output", str(qrels)], "lies inside the dataset"),
                          (["--output", str(root / "qrels" / "dev.tsv")], "lies inside the dataset"),
                          (["--output", str(tmp_path / "x"), "--json-out", str(tmp_path / "x")], "both write")):
        out = run_cli("eval.py", "--dataset", str(root), "--method", "bm25-flat", "--index-root", str(tmp_path / "idx"),
                      *args)
        one_line_error(out, message)
    assert qrels.read_bytes() == before and not (root / "qrels" / "dev.tsv").exists()
    assert not (tmp_path / "idx").exists()  # refused before any work


def test_export_output_naming_an_input_is_refused(offline_model, tmp_path):
    root = write_beir(tmp_path / "tiny")
    offline_model.save_pretrained(tmp_path / "ckpt")
    before = snapshot(root)
    for target in (root / "queries.jsonl", tmp_path / "ckpt" / "model.safetensors"):
        one_line_error(run_cli("-m", "bm25aug.cli", "export", "--checkpoint", str(tmp_path / "ckpt"), "--dataset",
                               str(root), "--output", str(target)), "which this command reads")
    assert snapshot(root) == before
    eval_out = run_cli("eval.py", "--dataset", str(root), "--checkpoint", str(tmp_path / "ckpt"), "--output",
                       str(tmp_path / "ckpt" / "model.safetensors"))
    one_line_error(eval_out, "which this command reads")


def test_training_refuses_a_folder_of_the_users_files(tiny_wp, tmp_path):
    from bm25aug.train.trainer import Trainer

    ds, _, flat = tiny_wp
    run = tmp_path / "mine"
    (run / "best").mkdir(parents=True)
    (run / "config.json").write_text('{"my": "experiment"}')
    (run / "log.jsonl").write_text('{"my": "results"}\n')
    (run / "best" / "weights.bin").write_bytes(b"precious")
    before = snapshot(run)
    start = time.perf_counter()
    with pytest.raises(UserError, match="holds files bm25aug did not write"):
        Trainer(tiny_train_config(run), ds, flat)
    assert snapshot(run) == before and not (run / "bm25aug_run.json").exists()
    assert time.perf_counter() - start < 5  # before the model is loaded, not a minute later
    with pytest.raises(UserError, match="lies inside the dataset"):
        Trainer(tiny_train_config(ds.path / "run"), ds, flat)


def test_a_device_a_link_or_a_fifo_given_as_output_is_written_into_not_replaced(tmp_path):
    import threading

    from bm25aug.io import write_json

    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    write_json(link, {"ndcg@10": 1.0})
    assert link.is_symlink() and Path("/dev/null").is_char_device()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_json(fifo, {"a": 1})
    reader.join(10)
    assert json.loads(got[0]) == {"a": 1} and fifo.is_fifo()


def test_an_onnx_folder_of_the_users_files_is_not_replaced(offline_model, tmp_path, caplog):
    """A folder named onnx/ that bm25aug did not write is left as it is: the export is read from
    the cache, and the warning names the folder."""
    from bm25aug.model.loading import load_encoder

    offline_model.save_pretrained(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "onnx").mkdir()
    (tmp_path / "ckpt" / "onnx" / "notes.txt").write_text("mine")
    assert load_encoder(tmp_path / "ckpt").encode("cats and lions")
    assert "is not an ONNX export of bm25aug" in caplog.text and str(tmp_path / "ckpt" / "onnx") in caplog.text
    assert [p.name for p in (tmp_path / "ckpt" / "onnx").iterdir()] == ["notes.txt"]
    assert (tmp_path / "ckpt" / "onnx" / "notes.txt").read_text() == "mine"


def test_an_index_is_never_built_inside_the_dataset(tmp_path):
    root = write_beir(tmp_path / "tiny")
    with pytest.raises(UserError, match="lies inside the dataset"):
        ensure_index(load_dataset(str(root)), "flat", root)
    assert sorted(p.name for p in root.iterdir()) == ["corpus.jsonl", "qrels", "queries.jsonl"]


def test_outputs_into_a_run_folder_or_the_models_own_folder_are_refused(offline_model, tmp_path):
    from bm25aug.model.export import export_term_lists
    from bm25aug.model.augmenter import QueryAugmenter

    root = write_beir(tmp_path / "tiny")
    offline_model.save_pretrained(tmp_path / "run" / "best")
    (tmp_path / "run" / "config.json").write_text('{"recipe": "mine"}')
    one_line_error(run_cli("-m", "bm25aug.cli", "export", "--checkpoint", str(tmp_path / "run"), "--dataset", str(root),
                           "--output", str(tmp_path / "run" / "config.json")), "lies inside --checkpoint")
    assert (tmp_path / "run" / "config.json").read_text() == '{"recipe": "mine"}'
    model = QueryAugmenter.from_pretrained(tmp_path / "run" / "best")
    with pytest.raises(UserError, match="lies inside the model"):
        export_term_lists(model, {"1": "cats"}, tmp_path / "run" / "best" / "bm25aug_config.json")
    with pytest.raises(UserError, match="is a folder"):
        export_term_lists(model, {"1": "cats"}, tmp_path)


def test_a_claimed_folder_loses_what_a_killed_writer_left(tmp_path):
    from bm25aug.io import claim_folder

    run = tmp_path / "run"
    run.mkdir()
    (run / "bm25aug_run.json").write_text("{}")
    stale = run / f".last.tmp.{DEAD_PID}.6a4a63a4"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"x" * 4096)
    claim_folder(run, "bm25aug_run.json", "a training run", "--output-dir").release()
    assert not stale.exists()


# ----------------------------------------------------------------------------------------- 2. qrels grades
@pytest.mark.parametrize("grade", ["2147483648", "4294967296", "-5000"])
def test_qrels_grades_out_of_range_are_one_line_errors(tmp_path, grade):
    root = write_beir(tmp_path / "tiny")
    (root / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t{grade}\n")
    with pytest.raises(UserError, match=f"test.tsv:3: relevance grade {grade} is out of range"):
        load_dataset(str(root)).split("test")


# ------------------------------------------------------------------------------ 3. indexes must be the dataset's
def test_an_index_of_another_dataset_or_corpus_is_refused(tiny_wp, tmp_path):
    from bm25aug.eval.evaluate import EvalConfig, evaluate

    ds, _, _ = tiny_wp
    other = load_dataset(str(write_beir(tmp_path / "other", docs={f"x{i}": ("t", f"text {i}") for i in range(3)})))
    foreign = ensure_index(other, "flat", tmp_path / "idx")
    with pytest.raises(UserError, match="built from dataset 'other'"):
        evaluate(EvalConfig(dataset=str(ds.path), method="bm25-flat", index=str(foreign), companions=False))
    edited = write_beir(tmp_path / "v2" / "tiny")  # the same name, a newer corpus
    with open(edited / "corpus.jsonl", "a") as f:
        f.write(json.dumps({"_id": "d9", "title": "Cats", "text": "cat mat"}) + "\n")
    old_index = ensure_index(load_dataset(str(write_beir(tmp_path / "v1" / "tiny"))), "flat", tmp_path / "v1idx")
    with pytest.raises(UserError, match="another version of tiny's corpus"):
        evaluate(EvalConfig(dataset=str(edited), method="bm25-flat", index=str(old_index), companions=False))
    stock = pyserini_index(tmp_path / "stock.flat")  # a stock index: its ids are checked instead
    with pytest.raises(UserError, match="8 of them unknown"):
        evaluate(EvalConfig(dataset=str(other.path), method="bm25-flat", index=str(stock), companions=False))
    assert evaluate(EvalConfig(dataset=str(ds.path), method="bm25-flat", index=str(stock),
                               companions=False)).metrics["bm25-flat"]["ndcg@10"] > 0.9


def test_a_stock_index_is_searched_only_as_what_it_is(tmp_path, offline_model, flat_model):
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    flat, wp = pyserini_index(tmp_path / "stock.flat"), pyserini_index(tmp_path / "stock.wp", offline_model.tokenizer)
    with pytest.raises(UserError, match="so it is a wp index, not flat"):
        BM25Searcher(wp)
    with pytest.raises(UserError, match="search it as flat"):
        BM25Searcher(flat, tokenizer="bert-base-uncased")
    with pytest.raises(UserError, match="search it as flat"):
        AugmentedSearcher(offline_model, BM25Searcher(flat, tokenizer=offline_model.tokenizer, flavor="wp"))
    with pytest.raises(UserError, match="so it is a wp index"):
        AugmentedSearcher(flat_model, BM25Searcher(wp, tokenizer=flat_model.tokenizer, flavor="flat"))
    cased = _cased_copy()
    with pytest.raises(UserError, match="no upper-case terms but the tokenizer keeps case"):
        BM25Searcher(wp, tokenizer=cased)


def test_a_method_never_searches_an_index_of_the_other_flavor(tiny_wp):
    from bm25aug.eval.evaluate import EvalConfig, evaluate

    ds, wp, flat = tiny_wp
    for method, index in (("bm25-flat", wp), ("bm25-wp", flat), ("bm25-rm3", wp)):
        with pytest.raises(UserError, match="index, not flat|index, not wp|is a wp index; rm3"):
            evaluate(EvalConfig(dataset=str(ds.path), method=method, index=str(index), companions=False))


def test_a_few_stemmed_stopwords_do_not_make_a_flat_index_wp(scifact_flat, tmp_path, caplog):
    from bm25aug.search.bm25 import BM25Searcher

    stock = tmp_path / "stock.flat"  # SciFact's flat index as Pyserini would have it: no meta.json
    shutil.copytree(scifact_flat, stock, ignore=shutil.ignore_patterns("meta.json", "docids.txt*", "write.lock"))
    with pytest.raises(UserError, match="search it as flat"):
        BM25Searcher(stock, tokenizer="bert-base-uncased")
    BM25Searcher(stock)
    assert "has stopwords" not in caplog.text


def _cased_copy():
    """The offline tokenizer with lowercasing switched off: the same vocabulary, other tokens."""
    from tokenizers import normalizers
    from transformers import AutoTokenizer

    from bm25aug.tokenization import offline_model_path

    tok = AutoTokenizer.from_pretrained(offline_model_path(), use_fast=True)
    tok.backend_tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False)
    return tok


def test_a_wp_index_refuses_a_tokenizer_with_other_casing(tiny_wp):
    from bm25aug.search.bm25 import BM25Searcher

    _, wp, _ = tiny_wp
    with pytest.raises(UserError, match="normalizes text differently|tokenizer keeps case"):
        BM25Searcher(wp, tokenizer=_cased_copy())


# ------------------------------------------------------------------------------------ 4. cached artefacts
def test_onnx_export_follows_its_sources_and_its_own_bytes(offline_model, tmp_path):
    from bm25aug.model.loading import load_encoder

    checkpoint = tmp_path / "ckpt"
    offline_model.save_pretrained(checkpoint)
    onnx = checkpoint / "onnx" / "model.int8.onnx"
    query = ["cats and lions in the garden"]
    expected = load_encoder(checkpoint).encode_batch(query)
    with open(onnx, "r+b") as f:  # 4 KB overwritten in the middle of the weights
        f.seek(onnx.stat().st_size // 2)
        f.write(b"\x7f" * 4096)
    assert load_encoder(checkpoint).encode_batch(query) == expected  # exported again, not read damaged
    onnx.unlink()
    assert load_encoder(checkpoint).encode_batch(query) == expected  # no traceback: exported again
    config = checkpoint / "bm25aug_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "target": "flat"}))
    flat = load_encoder(checkpoint).encode_batch(query)
    fresh = tmp_path / "fresh"  # the edited model, exported from scratch
    shutil.copytree(checkpoint, fresh, ignore=shutil.ignore_patterns("onnx"))
    assert flat == load_encoder(fresh).encode_batch(query) and "lion" in flat[0] and "lions" in expected[0]


def test_a_damaged_id_table_is_not_trusted(tiny_wp, tmp_path):
    from bm25aug.search.bm25 import BM25Searcher

    _, _, flat = tiny_wp
    copy = tmp_path / "tiny.flat"
    shutil.copytree(flat, copy)
    truth = BM25Searcher(copy).search("cat on a mat", 8)
    table = copy / "docids.txt"
    lines = table.read_text().splitlines()
    lines[0], lines[1] = lines[1], lines[0]
    table.write_text("\n".join(lines) + "\n")
    assert BM25Searcher(copy).search("cat on a mat", 8) == truth
    assert table.read_text().splitlines() != lines  # written again from the index


def test_damaged_caches_and_index_files_are_one_line_errors_or_rebuilt(tiny_wp, tmp_path, offline_model, monkeypatch):
    from bm25aug.lucene import analysis
    from bm25aug.search.bm25 import BM25Searcher

    _, _, flat = tiny_wp
    monkeypatch.setattr(analysis, "CACHE_DIR", tmp_path / "flat_map")
    monkeypatch.setattr(analysis, "_loaded", {})
    built = analysis.flat_map(offline_model.tokenizer)
    cache = next((tmp_path / "flat_map").glob("*.json"))
    cache.write_text(cache.read_text()[:1000])  # truncated
    monkeypatch.setattr(analysis, "_loaded", {})
    assert analysis.flat_map(offline_model.tokenizer).terms == built.terms
    bad_meta = tmp_path / "meta"
    shutil.copytree(flat, bad_meta)
    (bad_meta / "meta.json").write_text("{not json")
    with pytest.raises(UserError, match="meta.json is not a valid index description"):
        BM25Searcher(bad_meta)
    truncated = tmp_path / "truncated"
    shutil.copytree(flat, truncated)
    victim = max((p for p in truncated.iterdir() if p.suffix in (".cfs", ".doc", ".tim", ".fdt")),
                 key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[:-40])
    with pytest.raises(UserError, match="is damaged"):
        BM25Searcher(truncated).search("cat", 5)


def test_a_class_java_cannot_load_blames_the_jar_not_the_index(tmp_path):
    """A jar that lacks a class (seen with a cut-down jar) failed searches with "the index is
    damaged; rebuild it": the rebuild could not help, since the classpath was at fault."""
    from bm25aug.lucene.jvm import anserini_jar, start_jvm
    from bm25aug.lucene.reader import search_error

    start_jvm()  # before jnius is imported: importing it first starts a JVM without Anserini's jar
    from jnius import JavaException

    missing = "org/apache/lucene/search/BooleanQuery$1"
    raised = [  # as pyjnius raises the error itself, and as a Java future wraps it
        JavaException(f"JVM exception occurred: {missing}", "java.lang.NoClassDefFoundError", missing,
                      [f"java.lang.NoClassDefFoundError: {missing}"]),
        JavaException(f"JVM exception occurred: java.util.concurrent.ExecutionException: "
                      f"java.lang.NoClassDefFoundError: {missing}", "java.util.concurrent.ExecutionException",
                      f"java.lang.NoClassDefFoundError: {missing}", ["Caused by: java.lang.NoClassDefFoundError"]),
    ]
    for error in raised:
        message = str(search_error(tmp_path / "some.flat", error))
        assert "damaged" not in message and "bm25aug index" not in message
        assert missing in message and anserini_jar() in message and "--no-deps pyserini==1.6.0" in message
        assert "\n" not in message
    corrupt = JavaException("JVM exception occurred: checksum failed", "org.apache.lucene.index.CorruptIndexException",
                            "checksum failed", ["org.apache.lucene.index.CorruptIndexException: checksum failed"])
    assert "is damaged" in str(search_error(tmp_path / "some.flat", corrupt))


# -------------------------------------------------------------------------------------- 5. training folders
def test_a_training_folder_is_claimed_and_settings_checked_before_writing(tmp_path):
    from bm25aug.train.trainer import Trainer

    broad = "cat dog lions rain pasta telescope sparrows car"  # every query matches every document
    ds = load_dataset(str(write_beir(tmp_path / "tiny", queries={f"q{i}": broad for i in range(1, 9)})))
    flat = ensure_index(ds, "flat", tmp_path / "idx")
    for bad in ({"epochs": 0}, {"batch_size": 0}):
        with pytest.raises(UserError, match="out of range"):
            tiny_train_config(tmp_path / "bad", **bad)
    assert not (tmp_path / "bad").exists()
    first = Trainer(tiny_train_config(tmp_path / "run", negative_depth=3), ds, flat)
    with pytest.raises(UserError, match="another bm25aug process is writing a training run"):
        Trainer(tiny_train_config(tmp_path / "run"), ds, flat)
    assert {len(e.negatives) for e in first.examples} == {3}
    first._lock.release()  # as if killed before its first epoch ended
    second = Trainer(tiny_train_config(tmp_path / "run", negative_depth=1), ds, flat)
    assert {len(e.negatives) for e in second.examples} == {1}  # mined again for the new settings
    second.train()
    assert (tmp_path / "run" / "best" / "bm25aug_config.json").exists()
    other = load_dataset(str(write_beir(tmp_path / "v2" / "tiny", docs={**TINY_DOCS, "d9": ("Cats", "cat mat")},
                                        queries={f"q{i}": broad for i in range(1, 9)})))
    with pytest.raises(UserError, match="--resume on other corpora than the saved run"):
        Trainer(tiny_train_config(tmp_path / "run", epochs=2, negative_depth=1), other,
                ensure_index(other, "flat", tmp_path / "idx2"), resume=True)
    (tmp_path / "run" / "config.json").write_text('{"epochs": 6,')
    with pytest.raises(UserError, match="config.json is damaged"):
        Trainer(tiny_train_config(tmp_path / "run", epochs=2, negative_depth=1), ds, flat, resume=True)
    (tmp_path / "run" / "config.json").write_text(json.dumps(tiny_train_config(tmp_path / "run", negative_depth=1).__dict__))
    state = tmp_path / "run" / "last" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:5000])
    with pytest.raises(UserError, match="trainer_state.pt is damaged"):
        Trainer(tiny_train_config(tmp_path / "run", epochs=2, negative_depth=1), ds, flat, resume=True).train()
    shutil.rmtree(tmp_path / "run" / "last")  # to save disk, say; best/ is what is left
    weights = (tmp_path / "run" / "best" / "model.safetensors").read_bytes()
    with pytest.raises(UserError, match="already holds a training run"):
        Trainer(tiny_train_config(tmp_path / "run"), ds, flat)
    with pytest.raises(UserError, match="no last/ to continue it from"):
        Trainer(tiny_train_config(tmp_path / "run"), ds, flat, resume=True)
    with pytest.raises(UserError, match="holds the teacher"):
        Trainer(tiny_train_config(tmp_path / "run2", teacher=str(tmp_path / "run2" / "best")), ds, flat)
    assert (tmp_path / "run" / "best" / "model.safetensors").read_bytes() == weights


def test_a_broken_model_config_is_one_line_before_any_index_is_touched(tiny_beir, offline_model, tmp_path):
    from bm25aug.eval.evaluate import EvalConfig, evaluate

    offline_model.save_pretrained(tmp_path / "ckpt")
    config = tmp_path / "ckpt" / "bm25aug_config.json"
    for text, message in (("{not json", "is not a bm25aug model config"), ('{"target": "x/../.."}', "unknown target")):
        config.write_text(text)
        with pytest.raises(UserError, match=message):
            evaluate(EvalConfig(dataset=str(tiny_beir), method="augmented", checkpoint=str(tmp_path / "ckpt"),
                                index_root=str(tmp_path / "idx")))
    assert not (tmp_path / "idx").exists()


def test_the_layer_a_is_pooled_from_may_be_the_last_of_a_cut_encoder(tmp_path):
    from bm25aug.model.augmenter import QueryAugmenter

    model = QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, layers=0, aug_layer=0)
    assert "cats" in model.encode("cats and dogs")
    model.config.aug_layer = 5
    model.save_pretrained(tmp_path / "ckpt")
    with pytest.raises(UserError, match="aug_layer 5, but the encoder has 0 layers"):
        QueryAugmenter.from_pretrained(tmp_path / "ckpt")


# -------------------------------------------------------------------------------------- 6. metric semantics
def test_a_scored_run_file_is_treated_as_a_searched_run(tmp_path):
    from bm25aug.eval.evaluate import EvalConfig, score_run

    root = write_beir(tmp_path / "tiny")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 q1 1 9.0 x\nq1 Q0 d1 2 8.0 x\n")  # the query itself first, as in ArguAna
    kept = score_run(EvalConfig(dataset=str(root), remove_query=False), run)
    dropped = score_run(EvalConfig(dataset=str(root), remove_query=True), run)
    assert dropped["mrr@10"] > kept["mrr@10"]
    run.write_text("")
    with pytest.raises(UserError, match="holds no hits"):
        score_run(EvalConfig(dataset=str(root)), run)
    run.write_text("z1 Q0 d1 1 9.0 x\n")
    with pytest.raises(UserError, match="none of the 1 queries"):
        score_run(EvalConfig(dataset=str(root)), run)
    with pytest.raises(UserError, match="has no split ''"):
        score_run(EvalConfig(dataset=str(root), split=""), run)


def test_partial_runs_and_empty_queries_are_warned(tmp_path, caplog):
    from bm25aug.eval.evaluate import EvalConfig, score_run

    root = write_beir(tmp_path / "tiny", queries={"q1": "cat on a mat", "q2": "  "})
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 9.0 x\n")
    assert score_run(EvalConfig(dataset=str(root)), run)["num_queries"] == 2
    assert "1 judged queries have no text" in caplog.text and "no hits for 1 of the 2 queries" in caplog.text
    (root / "queries.jsonl").write_text("")
    with pytest.raises(UserError, match="none of its 2 judged queries is in the queries file"):
        load_dataset(str(root)).split("test")


def test_a_dpr_question_that_is_not_text_names_its_entry(tmp_path):
    root = tmp_path / "qa"
    root.mkdir()
    (root / "passages.tsv").write_text("id\ttext\ttitle\n1\tDenver won\tBroncos\n")
    (root / "train.json").write_text(json.dumps([{"question": 7, "answers": ["Denver"],
                                                  "positive_ctxs": [{"passage_id": "1"}]}]))
    with pytest.raises(UserError, match="train.json: question 0 is not a string"):
        load_dataset(str(root)).split("train")


@pytest.mark.parametrize("docid", ["d 1", "d\t1", "d1\u00a0", " d1"])
def test_doc_ids_a_run_file_cannot_hold_are_refused(tmp_path, docid):
    root = write_beir(tmp_path / "tiny", docs={**TINY_DOCS, docid: ("t", "text")})
    with pytest.raises(UserError, match="corpus.jsonl:9: document id .* holds whitespace"):
        len(load_dataset(str(root)).corpus)


# ---------------------------------------------------------------------------------- 7. interrupts, leftovers
def test_sigint_reaches_python_once_the_jvm_runs():
    """The child puts Python's own SIGINT handler in place first (a runner may start the tests
    with SIGINT ignored, as a background job of a non-interactive shell is, and Python keeps
    that), then starts the JVM, which must leave the handler alone (-Xrs). It sleeps in short
    steps: the kernel may hand the signal to a JVM thread, and Python sees it at its next check."""
    code = ("import os, signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from bm25aug.lucene.jvm import start_jvm\nstart_jvm()\n"
            "try:\n    os.kill(os.getpid(), signal.SIGINT)\n    for _ in range(1000):\n        time.sleep(0.01)\n"
            "except KeyboardInterrupt:\n    print('caught')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip() == "caught", (out.returncode, out.stderr)


def test_interrupted_training_stops_cleanly_and_says_how_to_resume(tiny_beir, tmp_path):
    args = [sys.executable, "train.py", "--dataset", str(tiny_beir), "--output-dir", str(tmp_path / "run"),
            "--index-root", str(tmp_path / "idx"), "--epochs", "500", "--batch-size", "2", "--dev-size", "2",
            "--negative-depth", "2", "--threads", "1"]
    proc = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("epoch 1:"):
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.communicate(timeout=120)[1]
    stderr = "".join(lines) + rest
    assert proc.returncode == 130, stderr
    assert "interrupted; temporaries removed; rerun with --resume" in stderr
    assert "Traceback" not in stderr and "INTERNAL ASSERT" not in stderr
    assert not [p for p in (tmp_path / "run").iterdir() if ".tmp." in p.name]


def test_deferred_interrupts_wait_for_a_stop_point():
    from bm25aug.interrupts import deferred, stop_point

    with deferred():
        os.kill(os.getpid(), signal.SIGTERM)  # recorded, not raised
        with pytest.raises(KeyboardInterrupt):
            stop_point()
        stop_point()  # once only


def test_temporaries_of_a_killed_build_are_removed_when_the_index_is_reused(tiny_wp):
    ds, _, flat = tiny_wp
    stale = flat.parent / f".{flat.name}.tmp.{DEAD_PID}.ab12"
    stale.mkdir()
    (stale / "_0.cfs").write_bytes(b"x" * 4096)
    assert ensure_index(ds, "flat", flat.parent) == flat  # reused, and the leftover removed
    assert not stale.exists()


def test_a_full_disk_while_saving_is_an_os_error(tmp_path):
    code = ("import resource, signal, sys\nfrom bm25aug.model.augmenter import QueryAugmenter\nm = QueryAugmenter.from_encoder(target='wp', weight_floor=0.0)\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # files stop at 1 MB, as a full disk\n"
            "try:\n    m.save_pretrained(sys.argv[1])\nexcept OSError as e:\n    print('OSError', e.errno)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ckpt")], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.stdout.startswith("OSError"), out.stderr[-2000:]
    assert not (tmp_path / "ckpt").exists() and not list(tmp_path.iterdir())  # nothing half-written


# ---------------------------------------------------------------------------- 8, 9. values: one place, one line
@pytest.mark.parametrize("args,message", [
    (["--k", "-5"], "--k -5 is out of range"), (["--k1", "-1"], "--k1 -1.0 is out of range"),
    (["--b", "5"], "--b 5.0 is out of range"), (["--k1", "nan"], "--k1 nan is out of range"),
    (["--threads", "-2"], "--threads -2 is out of range"), (["--aug-gate", "-1"], "--aug-gate -1 is out of range"),
])
def test_bad_values_are_one_line_errors(tmp_path, args, message):
    root = write_beir(tmp_path / "tiny")
    one_line_error(run_cli("eval.py", "--dataset", str(root), "--method", "bm25-flat",
                           "--index-root", str(tmp_path / "idx"), *args), message)


@pytest.mark.parametrize("edit,message", [({"aug_gate": -1}, "--aug-gate -1 is out of range"),
                                          ({"weight_floor": -1}, "--weight-floor -1 is out of range"),
                                          ({"target": "bm42"}, "unknown target 'bm42'"), ({"pooling": 3}, "unknown pooling")])
def test_a_hand_edited_model_config_is_refused_on_load(offline_model, tmp_path, edit, message):
    from bm25aug.model.augmenter import QueryAugmenter

    offline_model.save_pretrained(tmp_path / "ckpt")
    config = tmp_path / "ckpt" / "bm25aug_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **edit}))
    with pytest.raises(UserError, match=f"bm25aug_config.json: {message}"):
        QueryAugmenter.from_pretrained(tmp_path / "ckpt")


def test_repeated_judgments_are_counted_in_a_warning(tmp_path, caplog):
    root = write_beir(tmp_path / "tiny")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\n")
    assert load_dataset(str(root)).split("test").qrels == {"q1": {"d1": 2}}
    assert "1 lines judge a query-document pair already judged" in caplog.text


def test_api_values_are_checked_too(tiny_wp):
    from bm25aug.search.bm25 import BM25Searcher

    _, _, flat = tiny_wp
    searcher = BM25Searcher(flat)
    for bad in (10.0, True, 0, "10"):
        with pytest.raises(UserError, match="--k .* is out of range"):
            searcher.search("cat", k=bad)
    with pytest.raises(UserError, match="qid 'a' is given to more than one query"):
        searcher.batch_search(["cat", "dog"], ["a", "a"])
    with pytest.raises(UserError, match="--threads -1 is out of range"):
        searcher.batch_search(["cat"], ["a"], threads=-1)


@pytest.mark.parametrize("file,row,message", [
    ("corpus.jsonl", {"_id": "d9", "title": "t", "text": 5}, 'corpus.jsonl:9: "text" must be a string, not int'),
    ("corpus.jsonl", {"_id": None, "text": "t"}, 'corpus.jsonl:9: expected a JSON object with a string "_id"'),
    ("queries.jsonl", {"_id": "q9", "text": ["a", "list"]}, 'queries.jsonl:9: "text" must be a string, not list'),
])
def test_fields_of_the_wrong_type_name_their_line(tmp_path, file, row, message):
    root = write_beir(tmp_path / "tiny")
    with open(root / file, "a") as f:
        f.write(json.dumps(row) + "\n")
    with pytest.raises(UserError, match=message):
        ds = load_dataset(str(root))
        len(ds.corpus)
        ds.split("test")


def test_trec_qrels_in_a_beir_folder_are_read(tmp_path):
    root = write_beir(tmp_path / "tiny")
    (root / "qrels" / "test.tsv").write_text("q1 0 d1 1\nq2 0 d2 2\n")
    assert load_dataset(str(root)).split("test").qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path):
    root = write_beir(tmp_path / "tiny")
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        (root / name).write_bytes(b"\xef\xbb\xbf" + (root / name).read_bytes())
    ds = load_dataset(str(root))
    first = next(iter(TINY_DOCS))
    assert ds.corpus[first].title == TINY_DOCS[first][0] and len(ds.split("test").qrels) == 8


def test_api_term_lists_and_numpy_depths(tiny_wp):
    import numpy as np

    from bm25aug.search.bm25 import BM25Searcher

    _, _, flat = tiny_wp
    searcher = BM25Searcher(flat)
    assert searcher.search("cat", k=np.int64(3)) == searcher.search("cat", k=3)
    for terms, message in (({"cat": float("inf")}, "the weight of 'cat' is inf"), ({"": 1.0}, "term '' is empty")):
        with pytest.raises(UserError, match=message):
            searcher.search_terms(terms)


def test_weights_lucene_cannot_hold_and_bad_eval_flags(tiny_wp):
    from bm25aug.eval.evaluate import EvalConfig
    from bm25aug.search.bm25 import BM25Searcher
    from bm25aug.search.trec import write_trec_run

    _, _, flat = tiny_wp
    for weight in (1e39, -1.0):
        with pytest.raises(UserError, match="the weight of 'cat'"):
            BM25Searcher(flat).search_terms({"cat": weight})
    for bad in ({"companions": "no"}, {"remove_query": "yes"}, {"runtime": "xx"}):
        with pytest.raises(UserError, match="must be true or false|unknown query encoder runtime"):
            EvalConfig(dataset="scifact", **bad)
    with pytest.raises(UserError, match="id '' is empty"):
        write_trec_run({"": []}, "/nonexistent/run.trec")


def test_eval_run_with_output_and_meta_of_unknown_flavor(tiny_wp, tmp_path):
    from bm25aug.search.bm25 import BM25Searcher

    ds, _, flat = tiny_wp
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 d1 1 9.0 x\n")
    one_line_error(run_cli("eval.py", "--dataset", str(ds.path), "--run", str(run), "--output", str(tmp_path / "y")),
                   "--output writes the run of a search")
    copy = tmp_path / "copy.flat"
    shutil.copytree(flat, copy)
    (copy / "meta.json").write_text(json.dumps({**json.loads((copy / "meta.json").read_text()), "flavor": "bogus"}))
    with pytest.raises(UserError, match="unknown index flavor in .*meta.json 'bogus'"):
        BM25Searcher(copy)


def test_a_stock_index_can_be_the_first_thing_java_opens(tmp_path):
    stock = pyserini_index(tmp_path / "stock.flat")
    code = "import sys\nfrom bm25aug.search.bm25 import BM25Searcher\nprint(BM25Searcher(sys.argv[1]).search('cat', 3)[0].docid)\n"
    out = subprocess.run([sys.executable, "-c", code, str(stock)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.stdout.strip() == "d1", out.stderr[-2000:]


def test_export_top_k_must_be_positive(offline_model):
    from bm25aug.model.encoder import encode_queries

    with pytest.raises(UserError, match="--top-k -1 is out of range"):
        encode_queries(offline_model, ["cats"], top_k=-1)


def test_huge_k_and_long_or_invalid_queries(tiny_wp, tmp_path):
    from bm25aug.limits import MAX_QUERY_CHARS
    from bm25aug.search.bm25 import BM25Searcher

    ds, wp, flat = tiny_wp
    for index in (wp, flat):
        searcher = BM25Searcher(index)
        assert len(searcher.search("cat", k=2**31 - 1)) == len(searcher.search("cat", k=8))
        many = " ".join(f"w{i}" for i in range(MAX_QUERY_CHARS // 7))  # ~7,000 distinct terms
        assert searcher.search(many, 3) == []
        with pytest.raises(UserError, match="over the 50,000 limit"):
            searcher.search("cat " * (MAX_QUERY_CHARS // 4 + 1))
        with pytest.raises(UserError, match="lone surrogate"):
            searcher.search("cat \ud800 mat")
    root = write_beir(tmp_path / "tiny")
    with open(root / "corpus.jsonl", "a") as f:
        f.write('{"_id": "d9", "title": "t", "text": "bad \\ud800 text"}\n')
    with pytest.raises(UserError, match="corpus.jsonl:9 holds a lone surrogate"):
        len(load_dataset(str(root)).corpus)


# -------------------------------------------------------------------------------- 10. the docs' stock-index path
def test_augmented_eval_on_a_stock_flat_index_without_document_vectors(tiny_beir, tmp_path, flat_model):
    from bm25aug.eval.evaluate import EvalConfig, evaluate

    flat_model.save_pretrained(tmp_path / "ckpt")
    stock = pyserini_index(tmp_path / "stock.flat")  # Pyserini's indexer stores no document vectors
    result = evaluate(EvalConfig(dataset=str(tiny_beir), method="augmented", checkpoint=str(tmp_path / "ckpt"),
                                 index=str(stock), companions=False, index_root=str(tmp_path / "idx")))
    metrics = result.metrics["augmented"]
    assert metrics["ndcg@10"] > 0.5 and "added_precision_weight" not in metrics
