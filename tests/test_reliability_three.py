"""The third hostile-user probe (issue 41), command-line side; the server's cases are in
tests/test_serve_hardening.py. Each test failed on the release before the fix: outputs that
overwrote a file an input folder links to, crashes, input read wrongly without a word, and advice
that, followed, failed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bm25aug.errors import UserError
from conftest import write_beir
from test_reliability import ROOT, run_cli
from test_reliability_two import one_line_error


# ---------------------------------------------------------------- 1. outputs never overwrite a linked input file
def _linked_dataset(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A BEIR dataset whose qrels and corpus are symbolic links to files outside it, as a dataset
    assembled from shared files is."""
    source = write_beir(tmp_path / "source")
    shared, ds = tmp_path / "shared", tmp_path / "data" / "linked"
    (ds / "qrels").mkdir(parents=True)
    shared.mkdir()
    shutil.copy(source / "qrels" / "test.tsv", shared / "qrels_test.tsv")
    shutil.copy(source / "corpus.jsonl", shared / "corpus.jsonl")
    shutil.copy(source / "queries.jsonl", ds / "queries.jsonl")
    (ds / "qrels" / "test.tsv").symlink_to(shared / "qrels_test.tsv")
    (ds / "corpus.jsonl").symlink_to(shared / "corpus.jsonl")
    return ds, shared / "qrels_test.tsv", shared / "corpus.jsonl"


def test_eval_outputs_never_overwrite_a_file_the_dataset_links_to(tmp_path):
    ds, qrels, corpus = _linked_dataset(tmp_path)
    before = qrels.read_bytes(), corpus.read_bytes()
    for option, target in (("--output", qrels), ("--json-out", corpus), ("--json-out", qrels)):
        out = run_cli("eval.py", "--dataset", str(ds), "--method", "bm25-flat", "--index-root", str(tmp_path / "idx"),
                      option, str(target))
        one_line_error(out, "which the dataset")
    assert (qrels.read_bytes(), corpus.read_bytes()) == before


def test_a_hard_link_of_an_input_file_is_refused_as_output(tmp_path):
    root = write_beir(tmp_path / "tiny")
    twin = tmp_path / "elsewhere.tsv"
    os.link(root / "qrels" / "test.tsv", twin)
    out = run_cli("eval.py", "--dataset", str(root), "--method", "bm25-flat", "--index-root", str(tmp_path / "idx"),
                  "--output", str(twin))
    one_line_error(out, "is a hard link of")


def test_search_output_never_overwrites_a_file_the_model_links_to(offline_model, tiny_wp, tmp_path):
    _, wp, _ = tiny_wp
    model = tmp_path / "model"
    offline_model.save_pretrained(model)
    store = tmp_path / "store"
    store.mkdir()
    (model / "tokenizer.json").rename(store / "tokenizer.json")
    (model / "tokenizer.json").symlink_to(store / "tokenizer.json")
    before = (store / "tokenizer.json").read_bytes()
    queries = tmp_path / "q.tsv"
    queries.write_text("a1\tcat on a mat\n")
    out = run_cli("-m", "bm25aug.cli", "search", "--index", str(wp), "--model", str(model), "--queries", str(queries),
                  "--output", str(store / "tokenizer.json"))
    one_line_error(out, "which --model")
    assert (store / "tokenizer.json").read_bytes() == before


def test_a_folder_an_input_links_to_is_an_input_folder(tmp_path):
    from bm25aug.outputs import check_outputs

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "qrels").mkdir(parents=True)
    (elsewhere / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "qrels").symlink_to(elsewhere / "qrels")
    with pytest.raises(UserError, match="lies inside"):
        check_outputs({"--output": elsewhere / "qrels" / "new.tsv"}, {"the dataset": ds})
    with pytest.raises(UserError, match="holds the dataset"):
        check_outputs({"--output-dir": elsewhere}, {"the dataset": ds}, folders=("--output-dir",))
    check_outputs({"--output": tmp_path / "fine.tsv"}, {"the dataset": ds})  # anything else is written


# ------------------------------------------------------------------------------------------ 2. crashes
def _train_args(root: Path, run: Path, *extra: str) -> list[str]:
    return ["train", "--dataset", str(root), "--output-dir", str(run), "--index-root", str(root.parent / "idx"),
            "--batch-size", "4", "--dev-size", "2", "--negative-depth", "3", "--threads", "1", "--gate-quantile", "0",
            *extra]


def test_init_from_a_model_served_as_plain_bm25_trains_from_its_weights(tmp_path, caplog):
    from bm25aug.cli import main
    from bm25aug.model.augmenter import QueryAugmenter

    root = write_beir(tmp_path / "tiny")
    # significance 0.000001: no model passes, so best/ is plain BM25 (w = 1, a = 0), its learned weights kept
    assert main(_train_args(root, tmp_path / "base", "--epochs", "1", "--significance", "0.000001")) == 0
    base = QueryAugmenter.from_pretrained(tmp_path / "base" / "best")
    assert not (base.config.use_weights or base.config.use_augmentation)
    caplog.set_level("INFO")
    assert main(_train_args(root, tmp_path / "next", "--epochs", "1", "--significance", "0",
                            "--init-from", str(tmp_path / "base" / "best"))) == 0
    assert "served as plain BM25" in caplog.text
    model = QueryAugmenter.from_pretrained(tmp_path / "next" / "best")
    assert model.config.use_weights and model.config.use_augmentation


def test_reproduce_out_is_checked_before_any_work(tmp_path):
    precious = tmp_path / "precious.trec"
    precious.write_text("keep me\n")
    out = run_cli("-m", "bm25aug.reproduce", "--only", "scifact/bm25-flat", "--out", str(precious))
    one_line_error(out, "--out")
    assert "running" not in out.stdout and precious.read_text() == "keep me\n"


# ------------------------------------------------------------------------- 3. advice that works when followed
def _interrupt_saving(monkeypatch, after: bool) -> None:
    """The next last/ save is cut by a second Ctrl-C (``after``: the save ends, then Ctrl-C)."""
    from bm25aug.train.trainer import Trainer

    save = Trainer._save_state

    def cut(self, state):
        if after:
            save(self, state)
        monkeypatch.setattr(Trainer, "_save_state", save)
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_save_state", cut)


def test_two_interrupts_while_last_is_written_then_the_advised_resume_works(tmp_path, capsys, monkeypatch):
    from bm25aug.cli import main

    root, run = write_beir(tmp_path / "tiny"), tmp_path / "run"
    args = _train_args(root, run, "--epochs", "2", "--significance", "0")
    _interrupt_saving(monkeypatch, after=False)
    assert main(args) == 130
    assert "rerun with --resume" in capsys.readouterr().err
    assert (run / "best").exists() and not (run / "last").exists()
    assert main([*args, "--resume"]) == 0  # the advice, followed: the run starts again and ends
    assert [h["epoch"] for h in map(__import__("json").loads, (run / "log.jsonl").read_text().splitlines())] == [0, 1, 2]


@pytest.mark.parametrize("damage", ["weights", "state", "state gone"])
def test_a_damaged_last_names_a_fix_that_works(tmp_path, capsys, monkeypatch, damage):
    from bm25aug.cli import main

    root, run = write_beir(tmp_path / "tiny"), tmp_path / "run"
    args = _train_args(root, run, "--epochs", "2", "--significance", "0")
    _interrupt_saving(monkeypatch, after=True)  # Ctrl-C just after epoch 1's last/ is saved
    assert main(args) == 130
    capsys.readouterr()
    target = run / "last" / ("model.safetensors" if damage == "weights" else "trainer_state.pt")
    if damage == "state gone":
        target.unlink()  # an unfinished run without the trainer's state restarts
    else:
        target.write_bytes(target.read_bytes()[:4000])
        assert main([*args, "--resume"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"fix: remove {run / 'last'} and rerun with --resume" in err, err
        shutil.rmtree(run / "last")  # the advice, followed
    assert main([*args, "--resume"]) == 0
    assert (run / "best" / "README.md").read_text().count("## Training") == 1


def test_broken_pipes_end_quietly_as_unix_tools_do(tiny_wp, tmp_path):
    _, _, flat = tiny_wp
    queries = tmp_path / "q.tsv"
    queries.write_text("".join(f"q{i}\tcat mat dog rain\n" for i in range(3000)))
    cmd = (f"{sys.executable} -m bm25aug.cli search --index {flat} --queries {queries} --k 8 --threads 1 | head -1; "
           f"echo \"rc=${{PIPESTATUS[0]}}\"")
    out = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.splitlines()[0].startswith("q0 Q0 ") and "rc=141" in out.stdout, out
    assert "error" not in out.stderr and "Traceback" not in out.stderr and "Exception" not in out.stderr, out.stderr


# ---------------------------------------------------------------------------------- 4. input read as it is
def test_a_tsv_header_line_is_not_searched_as_a_query(tmp_path, caplog):
    from bm25aug.search.command import read_queries

    path = tmp_path / "q.tsv"
    path.write_text("qid\ttext\na1\tvitamin\n")
    assert read_queries(path) == {"a1": "vitamin"}
    assert "is a header" in caplog.text
    path.write_text("a1\tvitamin\nqid\ttext\n")  # only a first line can be a header
    assert list(read_queries(path)) == ["a1", "qid"]


def test_os_errors_name_a_fix_that_fits_their_cause(tmp_path):
    out = run_cli("-m", "bm25aug.cli", "eval", "--dataset", str(write_beir(tmp_path / "tiny")), "--run",
                  str(tmp_path / "missing.trec"))
    one_line_error(out, "no such file or folder")
    assert "no file name" not in out.stderr
    from bm25aug.limits import Range

    assert Range(1, 2**31 - 1, integer=True).describe() == "an integer from 1 to 2,147,483,647"


def test_a_model_a_training_run_is_writing_is_exported_outside_its_folder(offline_model, tmp_path, monkeypatch):
    from filelock import FileLock

    import bm25aug.model.onnx_encoder as onnx_encoder
    from bm25aug.io import lock_held
    from bm25aug.model.loading import load_encoder

    run = tmp_path / "run"
    offline_model.save_pretrained(run / "best")
    monkeypatch.setattr(onnx_encoder, "CACHE_DIR", tmp_path / "cache")
    lock = FileLock(str(run / ".lock"))
    lock.acquire()  # as the trainer holds it while it may replace best/
    try:
        assert lock_held(run)
        encoder = load_encoder(run / "best")
    finally:
        lock.release()
    assert not lock_held(run)
    assert not (run / "best" / "onnx").exists()  # a replaced best/ cannot take the export with it
    assert list((tmp_path / "cache").glob("*/model.int8.onnx"))
    assert encoder.encode("cat on a mat")


@pytest.mark.parametrize("files, message", [
    ({"collection.tsv": "0\tcats\n", "queries.test.tsv": "1\tcat\n"}, "has no judged split: no qrels.<split>.tsv"),
    ({"collection.tsv": "0\tcats\n", "queries.test.tsv": "1\tcat\n", "qrels.test.tsv": "1\t0\t0\t1\n",
      "corpus.jsonl": '{"_id": "d1", "text": "cats"}\n'}, "holds the corpus files of 2 layouts (beir, msmarco)"),
])
def test_a_missing_split_names_the_file_or_the_two_layouts(tmp_path, files, message):
    root = tmp_path / "ms"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    out = run_cli("eval.py", "--dataset", str(root), "--method", "bm25-flat", "--index-root", str(tmp_path / "idx"),
                  "--split", "test")
    one_line_error(out, message)


def test_a_linked_index_folder_is_called_a_link(tmp_path):
    from bm25aug.io import check_replaceable

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UserError, match="is a symbolic link"):
        check_replaceable(tmp_path / "link", "meta.json", "an index", "pass --force")


def test_the_packages_errors_tell_to_install_are_the_projects_own():
    """A fix that installs a package (it cannot run offline) names one this project depends on, at
    the version it pins, so that following it gives back what the project was installed with."""
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0].lower(): d.replace(" ", "") for d in project["dependencies"]}
    extras = set(project["optional-dependencies"])
    named = 0
    for path in (ROOT / "bm25aug").rglob("*.py"):
        for spec in re.findall(r"pip install (?:--\S+ )*'?([A-Za-z0-9_.\-\[\]]+(?:[<>=,]+[0-9.<>=,]+)?)'?", path.read_text()):
            named += 1
            if spec.startswith("bm25aug[") or spec == "-e":
                assert spec == "-e" or spec[len("bm25aug["):-1] in extras, (path, spec)
                continue
            name = re.split(r"[<>=]", spec, maxsplit=1)[0].lower()
            assert name in pins, (path, spec)
            if re.search(r"[<>=]", spec):
                assert spec.replace(" ", "") == pins[name], (path, spec, pins[name])
    assert named >= 5


def test_eval_without_a_model_names_the_training_command_that_makes_it(tmp_path):
    data = tmp_path / "data"
    write_beir(data / "tiny")
    env = {"BM25AUG_DATA_DIR": str(data)}
    out = run_cli(str(ROOT / "eval.py"), "--dataset", "tiny", "--method", "augmented", cwd=tmp_path, env=env)
    one_line_error(out, "fix: run `python train.py --dataset tiny`")
    command = out.stderr.split("fix: run `")[1].split("`")[0].split()
    assert command[:2] == ["python", "train.py"]
    trained = run_cli(str(ROOT / "train.py"), *command[2:], "--epochs", "1", "--threads", "1", cwd=tmp_path, env=env)
    assert trained.returncode == 0, trained.stderr
    again = run_cli(str(ROOT / "eval.py"), "--dataset", "tiny", "--method", "augmented", "--no-companions",
                    cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr


def test_a_second_training_into_a_run_folder_is_told_to_resume_and_resume_works(tmp_path, capsys):
    from bm25aug.cli import main

    root, run = write_beir(tmp_path / "tiny"), tmp_path / "run"
    args = _train_args(root, run, "--epochs", "1", "--significance", "0")
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2
    assert "fix: pass --resume to continue it" in capsys.readouterr().err
    assert main([*args, "--epochs", "2", "--resume"]) == 0  # the advice, followed (one more epoch)


def test_an_id_with_a_nul_never_names_another_document(tmp_path):
    from bm25aug.data.corpus import Corpus

    root = write_beir(tmp_path / "tiny")
    corpus = Corpus(root / "corpus.jsonl", "beir")
    assert "d1" in corpus and "d1\x00" not in corpus and "d1\x00\x00" not in corpus
    assert corpus.has(["d1", "d1\x00", "d2"]).tolist() == [True, False, True]
    (root / "corpus.jsonl").write_text('{"_id": "d1\\u0000", "title": "", "text": "cats"}\n')
    with pytest.raises(UserError, match="control character"):
        Corpus(root / "corpus.jsonl", "beir")


def test_an_ended_run_without_last_is_continued_as_its_error_says(tmp_path, capsys):
    from bm25aug.cli import main

    root, run = write_beir(tmp_path / "tiny"), tmp_path / "run"
    args = _train_args(root, run, "--epochs", "1", "--significance", "0")
    assert main(args) == 0
    shutil.rmtree(run / "last")  # to save disk, say
    capsys.readouterr()
    assert main([*args, "--epochs", "2", "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"--init-from {run / 'best'} --output-dir NEW_FOLDER" in err, err
    # the advice, followed (the model's own settings come with it, so none is repeated)
    assert main(["train", "--dataset", str(root), "--index-root", str(root.parent / "idx"), "--batch-size", "4",
                 "--dev-size", "2", "--negative-depth", "3", "--threads", "1", "--epochs", "1", "--significance", "0",
                 "--init-from", str(run / "best"), "--output-dir", str(tmp_path / "next")]) == 0
