"""What a hostile user found (issue 10): data loss, silent wrong results, runs that do not repeat.
Each test failed on the release before the fix."""

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.lucene.index import ensure_index, index_path
from conftest import write_beir

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------ 1. data loss
def test_foreign_folder_at_index_path_is_never_touched(tiny_beir, tmp_path):
    ds = load_dataset(str(tiny_beir))
    foreign = index_path(ds.name, "wp", tmp_path / "indexes")
    foreign.mkdir(parents=True)
    (foreign / "my_notes.txt").write_text("precious")
    (foreign / "segments_3").write_bytes(b"a user's own Lucene index")
    before = snapshot(foreign)
    with pytest.raises(UserError, match="not built by bm25aug.*--force"):
        ensure_index(ds, "wp", tmp_path / "indexes")
    assert snapshot(foreign) == before
    out = run_cli("eval.py", "--dataset", str(tiny_beir), "--method", "bm25-wp", "--index-root", str(tmp_path / "indexes"))
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith("error: ")
    assert snapshot(foreign) == before
    forced = run_cli("-m", "bm25aug.cli", "index", "--dataset", str(tiny_beir), "--flavor", "wp", "--force",
                     "--index-root", str(tmp_path / "indexes"))
    assert forced.returncode == 0, forced.stderr
    assert (foreign / "meta.json").exists() and not (foreign / "my_notes.txt").exists()


def test_index_command_reuses_an_up_to_date_index(tiny_wp):
    ds, wp, _ = tiny_wp
    built = json.loads((wp / "meta.json").read_text())
    files = snapshot(wp)
    out = run_cli("-m", "bm25aug.cli", "index", "--dataset", str(ds.path), "--flavor", "wp", "--index-root", str(wp.parent))
    assert out.returncode == 0, out.stderr
    assert json.loads((wp / "meta.json").read_text()) == built and snapshot(wp) == files


def test_save_pretrained_refuses_a_foreign_folder(offline_model, tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "thesis.tex").write_text("x")
    with pytest.raises(UserError, match="will not delete it"):
        offline_model.save_pretrained(target)
    assert (target / "thesis.tex").read_text() == "x"


# --------------------------------------------------------------------------------------- 2. threads
def test_batch_search_threads_equal_one_thread(scifact, scifact_wp):
    from bm25aug.search.bm25 import BM25Searcher

    split = scifact.split("test")
    qids, queries = list(split.queries), list(split.queries.values())
    for index in (scifact_wp, ensure_index(scifact, "flat")):
        searcher = BM25Searcher(index)
        single = searcher.batch_search(queries, qids, k=1000, threads=1)
        for _ in range(3):
            assert searcher.batch_search(queries, qids, k=1000, threads=2) == single


def test_augmented_batch_search_threads_equal_one_thread(scifact, scifact_wp, offline_model, tmp_path):
    from bm25aug.search.augmented import AugmentedSearcher

    offline_model.save_pretrained(tmp_path / "ckpt")
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "ckpt", scifact_wp, top_k=64)
    split = scifact.split("test")
    qids, queries = list(split.queries)[:100], list(split.queries.values())[:100]
    single = searcher.batch_search(queries, qids, k=1000, threads=1)
    assert single == {q: searcher.search(t, 1000) for q, t in zip(qids, queries)}
    for _ in range(2):
        assert searcher.batch_search(queries, qids, k=1000, threads=2) == single


def test_two_seeded_trainings_write_identical_logs(tiny_wp, tmp_path):
    from bm25aug.train.arguments import TrainConfig
    from bm25aug.train.trainer import Trainer

    ds, _, flat = tiny_wp  # the default target, flat
    logs = []
    for name in ("a", "b"):
        config = TrainConfig(dataset="tiny", output_dir=str(tmp_path / name), epochs=2, batch_size=4, dev_size=2,
                             negative_depth=3, threads=2)
        Trainer(config, ds, flat).train()
        logs.append((tmp_path / name / "log.jsonl").read_bytes())
    assert logs[0] == logs[1]


# ----------------------------------------------------------------------------------- 3. stale index
def test_corpus_edit_with_same_lengths_rebuilds(tmp_path):
    from bm25aug.search.bm25 import BM25Searcher

    root = write_beir(tmp_path / "tiny")
    ds = load_dataset(str(root))
    assert BM25Searcher(ensure_index(ds, "flat", tmp_path / "idx")).search("telescope", 1)[0].docid == "d6"
    text = (root / "corpus.jsonl").read_text()
    (root / "corpus.jsonl").write_text(text.replace("telescope", "microscop"))  # same length
    ds = load_dataset(str(root))
    assert BM25Searcher(ensure_index(ds, "flat", tmp_path / "idx")).search("telescope", 1) == []


# ------------------------------------------------------------------------------- 4. silent miscounts
# (judged queries without a text: tests/test_data.py)
def test_duplicate_doc_ids_warn_and_keep_the_first(tiny_beir, caplog):
    with open(tiny_beir / "corpus.jsonl", "a") as f:
        f.write(json.dumps({"_id": "d1", "title": "Impostor", "text": "not the cat"}) + "\n")
    with caplog.at_level(logging.WARNING):
        corpus = load_dataset(str(tiny_beir)).corpus
    assert "1 repeated document ids" in caplog.text and corpus["d1"].title == "Cats"


@pytest.mark.parametrize("answers", ["['Denver' 'Broncos']", "{'Denver'}", "42", "[]", "['a', 3]", "Denver"])
def test_malformed_answer_lists_are_errors(tmp_path, answers):
    root = tmp_path / "qa"
    root.mkdir()
    (root / "passages.tsv").write_text("id\ttext\ttitle\n1\tDenver won\tSB\n")
    (root / "test.qa.tsv").write_text(f"who won\t{answers}\n")
    with pytest.raises(UserError, match=r"test.qa.tsv:1: answers must be a non-empty list"):
        load_dataset(str(root)).split("test")


def test_well_formed_answer_lists_parse(tmp_path):
    root = tmp_path / "qa"
    root.mkdir()
    (root / "passages.tsv").write_text("id\ttext\ttitle\n1\tDenver won\tSB\n")
    (root / "test.qa.tsv").write_text("who won\t['Denver Broncos', \"Broncos\",]\n")
    assert load_dataset(str(root)).split("test").answers["test-0"] == ["Denver Broncos", "Broncos"]


def test_run_file_checks(tmp_path, caplog):
    from bm25aug.eval.metrics import evaluate_split
    from bm25aug.search.trec import read_trec_run

    bad = tmp_path / "nan.trec"
    bad.write_text("q1 Q0 d1 1 nan x\n")
    with pytest.raises(UserError, match="nan.trec:1: score 'nan' is not a finite number"):
        read_trec_run(bad)
    dup = tmp_path / "dup.trec"
    dup.write_text("q1 Q0 d1 1 3.0 x\nq1 Q0 d1 2 2.0 x\nzz Q0 d1 1 1.0 x\n")
    with caplog.at_level(logging.WARNING):
        run = read_trec_run(dup)
        ds = load_dataset(str(write_beir(tmp_path / "tiny")))
        evaluate_split(run, ds.split("test"), ds.corpus)
    assert [h.docid for h in run["q1"]] == ["d1"]
    assert "1 lines repeat a document" in caplog.text and "1 of the run's 2 queries are not in this split" in caplog.text


# ---------------------------------------------------------------------------------- 5. empty queries
@pytest.mark.parametrize("query", ["\U0001F600\U0001F680", "\ufdfa \u06bf", "\x00"])
def test_queries_without_known_tokens_have_no_hits(tiny_wp, offline_model, tmp_path, query):
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    _, wp, _ = tiny_wp
    assert BM25Searcher(wp).search(query) == []
    assert offline_model.encode(query) == {}
    offline_model.save_pretrained(tmp_path / "ckpt")
    assert AugmentedSearcher.from_pretrained(tmp_path / "ckpt", wp).search(query) == []


def test_non_string_queries_are_type_errors(tiny_wp):
    from bm25aug.search.bm25 import BM25Searcher

    _, wp, _ = tiny_wp
    for query in (None, 3, b"cat"):
        with pytest.raises(TypeError, match="a query must be a str"):
            BM25Searcher(wp).search(query)


# ------------------------------------------------------------------------------- 6. one-line errors
def _assert_one_line_error(out, message):
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and message in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize("damage,message", [
    (lambda r: (r / "corpus.jsonl").write_bytes((r / "corpus.jsonl").read_bytes() + b'{"_id": "x", "text": "\xff"}\n'),
     "corpus.jsonl:9: not valid UTF-8"),
    (lambda r: (r / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n"),
     "relevance grade 'high' is not an integer"),
    (lambda r: (r / "qrels" / "test.tsv").write_text(""), "holds no judgments"),
])
def test_bad_files_give_one_line_errors(tmp_path, damage, message):
    root = write_beir(tmp_path / "tiny")
    damage(root)
    _assert_one_line_error(run_cli("eval.py", "--dataset", str(root), "--method", "bm25-flat",
                                   "--index-root", str(tmp_path / "idx")), message)
    assert not (tmp_path / "idx").exists() or not any((tmp_path / "idx").iterdir())  # checked before indexing


def test_output_paths_checked_before_work(tmp_path):
    root = write_beir(tmp_path / "tiny")
    out = run_cli("eval.py", "--dataset", str(root), "--method", "bm25-flat", "--output", str(tmp_path),
                  "--index-root", str(tmp_path / "idx"))
    _assert_one_line_error(out, "is a folder")
    assert not (tmp_path / "idx").exists()
    (tmp_path / "a_file").write_text("")
    out = run_cli("eval.py", "--dataset", str(root), "--method", "bm25-flat", "--json-out", str(tmp_path / "a_file" / "m.json"),
                  "--index-root", str(tmp_path / "idx"))
    _assert_one_line_error(out, "cannot write in")


def test_checkpoint_without_tokenizer_json(offline_model, tmp_path):
    from bm25aug.model.augmenter import QueryAugmenter

    offline_model.save_pretrained(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "tokenizer.json").unlink()
    with pytest.raises(UserError, match="has no tokenizer.json"):
        QueryAugmenter.from_pretrained(tmp_path / "ckpt")


# ------------------------------------------------------------------------------------------- 7. resume
def test_resume_after_kill_between_log_and_checkpoint(tiny_wp, tmp_path):
    from bm25aug.train.arguments import TrainConfig
    from bm25aug.train.trainer import Trainer

    ds, _, flat = tiny_wp
    config = dict(dataset="tiny", output_dir=str(tmp_path / "run"), batch_size=4, dev_size=2, negative_depth=3, threads=1)
    Trainer(TrainConfig(epochs=1, **config), ds, flat).train()
    log_path = tmp_path / "run" / "log.jsonl"
    lines = log_path.read_text().splitlines()
    # As if killed after log.jsonl got epoch 2 but before last/ was saved.
    log_path.write_text("\n".join([*lines, json.dumps({**json.loads(lines[-1]), "epoch": 2})]) + "\n")
    Trainer(TrainConfig(epochs=2, **config), ds, flat, resume=True).train()
    assert [json.loads(line)["epoch"] for line in log_path.read_text().splitlines()] == [0, 1, 2]


# ---------------------------------------------------------------------------------- 8. leftovers, races
def test_stale_temporaries_are_cleaned(tiny_beir, tmp_path):
    ds = load_dataset(str(tiny_beir))
    root = tmp_path / "idx"
    dead = 2**22 + 12345  # above pid_max, so no process has it
    stale = [root / f".tiny.flat.building.{dead}.ab12", root / f".tiny.flat.tmp.{dead}.cd34"]
    for p in stale:
        p.mkdir(parents=True)
        (p / "junk").write_bytes(b"x" * 1000)
    (root / f".meta.json.tmp.{dead}.ef56").write_text("half")
    ensure_index(ds, "flat", root)  # cleans what belongs to tiny.flat, and only that
    assert not any(p.exists() for p in stale)
    assert sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock")) == [f".meta.json.tmp.{dead}.ef56", "tiny.flat"]


def test_two_processes_build_one_index(tmp_path):
    root = write_beir(tmp_path / "tiny")
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout);"
            "from bm25aug.data.registry import load_dataset; from bm25aug.lucene.index import ensure_index;"
            f"ensure_index(load_dataset({str(root)!r}), 'wp', {str(tmp_path / 'idx')!r})")
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outputs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum("building wp index" in out for out in outputs) == 1
    assert (tmp_path / "idx" / "tiny.wp" / "meta.json").exists()


# ------------------------------------------------------------------------------------------ 9. startup
def test_local_models_load_without_asking_the_hub(monkeypatch):
    from bm25aug import tokenization

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    tokenization.hub_reachable.cache_clear()
    tokenization.load_tokenizer.cache_clear()
    asked = []
    monkeypatch.setattr(tokenization.socket, "create_connection", lambda *a, **k: asked.append(a) or (_ for _ in ()).throw(OSError()))
    try:
        assert tokenization.hub_then_local("bert-base-uncased", prefer_hub=False)[1][0] == tokenization.offline_model_path()
        assert len(tokenization.load_tokenizer()) == 30522
    finally:
        tokenization.hub_reachable.cache_clear()
        tokenization.load_tokenizer.cache_clear()
    assert len(asked) <= 1  # one reachability probe, no retries


# ----------------------------------------------------------------------------------- 10. small things
def test_new_files_and_folders_respect_the_umask(tmp_path):
    from bm25aug.io import atomic_dir, write_json

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "m.json", {"a": 1})
        with atomic_dir(tmp_path / "d", "marker") as tmp:
            (tmp / "marker").write_text("")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755
