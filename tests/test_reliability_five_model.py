"""The packaged model ``general`` fails closed (issue 57, rows G6, G9, G11, G12, G14, G19-G22): every
file it reads is checked against ``package.json`` (a damaged one is one line, never a traceback, a
hang or plain BM25 served silently); its bare name means the packaged model, a folder of that
name is used only when written as a path, and eval names the model each row used. Each test works
on a copy of the package in tmp_path, never on the package itself."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from bm25aug.errors import UserError
from bm25aug.model import packaged
from conftest import TINY_QUERIES
from test_reliability import ROOT

GENERAL = packaged.PACKAGED_ROOT / "general"
QUERY = "cat on a mat"
CLI_TIMEOUT = 300  # seconds: a regression that hangs fails instead


def _run(args: list[str], cwd: Path):
    """A command of this checkout's Python in ``cwd``, killed (a failure) after ``CLI_TIMEOUT``."""
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


class Hung(Exception):
    """Raised in a body still running at its deadline (not an OSError, which the code under test may catch)."""


@contextmanager
def deadline(seconds: int = 120):
    """``Hung`` where the body is still running after ``seconds`` (a read without end)."""
    def expire(*_):
        raise Hung(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def redigest(copy: Path, name: str) -> None:
    """``package.json`` of ``copy`` updated to match ``name`` as it is now (its digest is its own claim)."""
    record = json.loads((copy / packaged.PACKAGE_FILE).read_text())
    record["files"][name] = packaged.file_record(copy / name)
    if name == packaged.ONNX_FILE:
        record["onnx_digest"] = record["files"][name]["blake2b"]
    (copy / packaged.PACKAGE_FILE).write_text(json.dumps(record, indent=2))


def _tok_missing(c):
    (c / "tokenizer.json").unlink()


def _tok_empty_model(c):
    (c / "tokenizer.json").write_text('{"version": "1.0", "model": {}}')


def _tok_empty_model_redigested(c):
    _tok_empty_model(c)
    redigest(c, "tokenizer.json")


def _tok_truncated(c):
    data = (c / "tokenizer.json").read_bytes()
    (c / "tokenizer.json").write_bytes(data[:len(data) // 2])


def _onnx_random_redigested(c):
    size = (c / packaged.ONNX_FILE).stat().st_size
    (c / packaged.ONNX_FILE).write_bytes(os.urandom(size))
    redigest(c, packaged.ONNX_FILE)


def _onnx_dev_zero(c):
    (c / packaged.ONNX_FILE).unlink()
    (c / packaged.ONNX_FILE).symlink_to("/dev/zero")


def _onnx_fifo(c):
    (c / packaged.ONNX_FILE).unlink()
    os.mkfifo(c / packaged.ONNX_FILE)


def _config_missing(c):
    (c / "bm25aug_config.json").unlink()


def _config_fifo(c):  # (not /dev/zero: a whole-file read of it would fill the memory, not time out)
    (c / "bm25aug_config.json").unlink()
    os.mkfifo(c / "bm25aug_config.json")


def _tok_folder(c):
    (c / "tokenizer.json").unlink()
    (c / "tokenizer.json").mkdir()


def _tokcfg_missing(c):
    (c / "tokenizer_config.json").unlink()


def _record_without_files(c):
    record = json.loads((c / packaged.PACKAGE_FILE).read_text())
    del record["files"]
    (c / packaged.PACKAGE_FILE).write_text(json.dumps(record))


def _record_fifo(c):
    (c / packaged.PACKAGE_FILE).unlink()
    os.mkfifo(c / packaged.PACKAGE_FILE)


# damage -> (the file named, what the line says of it)
DAMAGES = {
    _tok_missing: ("tokenizer.json", "missing"),  # G12: served plain BM25
    _tok_empty_model: ("tokenizer.json", "bytes, not the"),  # G14, digest not updated
    _tok_empty_model_redigested: ("tokenizer.json", "KeyError"),  # G14: a transformers traceback
    _tok_truncated: ("tokenizer.json", "bytes, not the"),
    _onnx_random_redigested: (packaged.ONNX_FILE, ""),  # G9: an onnxruntime InvalidProtobuf traceback
    _onnx_dev_zero: (packaged.ONNX_FILE, "a device, not a regular file"),  # G11: a hang (read in chunks)
    _onnx_fifo: (packaged.ONNX_FILE, "a FIFO, not a regular file"),
    _config_missing: ("bm25aug_config.json", "missing"),
    _config_fifo: ("bm25aug_config.json", "a FIFO, not a regular file"),
    _tok_folder: ("tokenizer.json", "a folder, not a regular file"),
    _tokcfg_missing: ("tokenizer_config.json", "missing"),  # G13: it loaded; now every file is checked
    _record_without_files: (packaged.PACKAGE_FILE, "lists no files"),
    _record_fifo: (packaged.PACKAGE_FILE, "a FIFO, not a regular file"),
}


# the kinds of damage also run through `bm25aug search` (a process each: the library's line is the same)
THROUGH_THE_CLI = {_tok_missing, _tok_empty_model_redigested, _onnx_random_redigested, _onnx_dev_zero, _record_fifo}


def damaged_copy(tmp_path: Path, damage) -> Path:
    copy = tmp_path / "general"
    shutil.copytree(GENERAL, copy)
    damage(copy)
    return copy


def assert_one_line(message: str, copy: Path, file: str, why: str) -> None:
    assert "\n" not in message, message
    assert f"the packaged model general in {copy} is incomplete or damaged ({file}: " in message, message
    assert why in message and "fix: restore" in message and "reinstall bm25aug" in message, message


@pytest.mark.parametrize("damage", list(DAMAGES), ids=lambda d: d.__name__.strip("_"))
def test_a_damaged_package_is_one_line_on_every_path(damage, tmp_path, tiny_wp):
    """load_encoder, AugmentedSearcher and (for the kinds in ``THROUGH_THE_CLI``) ``bm25aug search``:
    one line naming the file, no traceback, no hang, no plain BM25 served in silence."""
    from bm25aug.model.loading import load_encoder
    from bm25aug.search.augmented import AugmentedSearcher

    file, why = DAMAGES[damage]
    copy = damaged_copy(tmp_path, damage)
    flat = tiny_wp[2]
    with deadline():
        with pytest.raises(UserError) as e:
            load_encoder(copy)
        assert_one_line(str(e.value), copy, file, why)
        with pytest.raises(UserError) as e:
            AugmentedSearcher.from_pretrained(copy, flat)
        assert_one_line(str(e.value), copy, file, why)
    if damage not in THROUGH_THE_CLI:
        return
    out = _run(["-m", "bm25aug.cli", "search", "--index", str(flat), "--model", str(copy), "--query", QUERY], ROOT)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the packaged model general in "), out.stderr
    assert_one_line(lines[0], copy, file, why)


def test_the_intact_package_loads_as_before_and_writes_nothing(tiny_wp):
    """Every file it reads is listed and matches; the encoder is the one its files make (what
    load_encoder built before the files were checked); loading writes nothing into the package."""
    from transformers import AutoTokenizer

    from bm25aug.eval.checkpoints import plain_bm25
    from bm25aug.model.config import AugmenterConfig
    from bm25aug.model.onnx_encoder import OnnxQueryEncoder
    from bm25aug.model.loading import load_encoder
    from bm25aug.model.targets import make_target
    from bm25aug.search.bm25 import BM25Searcher

    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in GENERAL.iterdir()}
    record = packaged.check_files(GENERAL)
    assert set(record["files"]) == set(before) - {packaged.PACKAGE_FILE, "README.md"}
    assert record["onnx_digest"] == record["files"][packaged.ONNX_FILE]["blake2b"]  # older readers still check it
    assert record["bytes"] == sum(f["bytes"] for f in record["files"].values())
    encoder = load_encoder("general")
    config = AugmenterConfig.load(GENERAL)
    tokenizer = AutoTokenizer.from_pretrained(GENERAL, use_fast=True)
    reference = OnnxQueryEncoder(GENERAL / packaged.ONNX_FILE, config, tokenizer, make_target(tokenizer, config),
                                 GENERAL)
    queries = [*TINY_QUERIES.values(), "vitamin B12 deficiency"]
    assert encoder.encode_batch(queries) == reference.encode_batch(queries)
    bm25 = BM25Searcher(tiny_wp[2], flavor="flat")  # and it is no plain BM25 (G12: every word [UNK])
    assert not plain_bm25(bm25, queries, [bm25.indexed(t) for t in encoder.encode_batch(queries)])
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in GENERAL.iterdir()} == before


def other_model(folder: Path) -> Path:
    """A copy of the package that serves another ranking (a weight floor of 5), its digests updated:
    a valid model that is not the packaged one."""
    shutil.copytree(GENERAL, folder)
    config = json.loads((folder / "bm25aug_config.json").read_text())
    config["weight_floor"] = 5.0
    (folder / "bm25aug_config.json").write_text(json.dumps(config, indent=2))
    redigest(folder, "bm25aug_config.json")
    return folder


def search_lines(out) -> list[str]:
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def packaged_hits(tiny_wp, tmp_path_factory):
    """``--model general`` from a folder that holds no ./general."""
    out = _run(["-m", "bm25aug.cli", "search", "--index", str(tiny_wp[2]), "--model", "general", "--query", QUERY],
               tmp_path_factory.mktemp("elsewhere"))
    assert "exists and is not used" not in out.stderr
    return search_lines(out)


SHADOWS = {"another model": other_model, "an empty folder": lambda p: p.mkdir(),
           "a file": lambda p: p.write_text("a log\n")}


@pytest.mark.parametrize("shadow", list(SHADOWS))
def test_the_bare_name_is_the_packaged_model_and_a_shadowing_path_is_named(shadow, tmp_path, tiny_wp, packaged_hits):
    """G19, G20: ``--model general`` in a folder holding ./general searches with the packaged model
    and says that ./general is not used; ``--model ./general`` uses ./general (or refuses it in one line)."""
    SHADOWS[shadow](tmp_path / "general")
    flat = str(tiny_wp[2])
    out = _run(["-m", "bm25aug.cli", "search", "--index", flat, "--model", "general", "--query", QUERY], tmp_path)
    assert search_lines(out) == packaged_hits
    named = [line for line in out.stderr.splitlines() if "exists and is not used" in line]
    assert len(named) == 1 and "general: using the packaged model" in named[0] and "fix: pass ./general" in named[0]
    local = _run(["-m", "bm25aug.cli", "search", "--index", flat, "--model", "./general", "--query", QUERY], tmp_path)
    assert "exists and is not used" not in local.stderr
    if shadow == "another model":
        assert search_lines(local) != packaged_hits
        from bm25aug.search.augmented import AugmentedSearcher

        own = AugmentedSearcher.from_pretrained(tmp_path / "general", tiny_wp[2]).search(QUERY, k=10)
        assert [line.split()[1:3] for line in search_lines(local)] == [[h.docid, f"{h.score:.5f}"] for h in own]
    else:
        assert local.returncode == 2 and len(local.stderr.strip().splitlines()) == 1, local.stderr
        assert "is not a bm25aug checkpoint" in local.stderr


def test_resolve_reads_a_bare_name_as_the_package_and_anything_else_as_a_path(tmp_path, monkeypatch, caplog):
    """G19-G22 in the library: only the bare ``str`` name is the package; the warning is once a process."""
    from bm25aug.eval.checkpoints import resolve_checkpoint

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(packaged, "_named", set(), raising=False)  # (the warning is once a process)
    assert packaged.resolve("general") == GENERAL and not caplog.records
    (tmp_path / "general").mkdir()
    (tmp_path / "checkpoints" / "general" / "best").mkdir(parents=True)  # G22: the checkpoint root is not searched
    assert packaged.resolve("general") == GENERAL
    assert resolve_checkpoint("general", "scifact", False) == GENERAL
    warned = [r.getMessage() for r in caplog.records if "exists and is not used" in r.getMessage()]
    assert len(warned) == 1 and "./general" in warned[0], warned
    for path in ("./general", "general/", str(tmp_path / "general"), Path("general")):
        assert packaged.resolve(path) == Path(path)
    assert packaged.resolve("checkpoints/x") == Path("checkpoints/x")
    assert "checkpoints/general" not in (packaged.__doc__ or "")


def test_eval_names_the_model_of_each_row_and_labels_plain_bm25(tmp_path, tiny_wp):
    """G21: with ./general/best a model that changes nothing (a static table with both heads off),
    ``--checkpoint general`` is the packaged model and says so; ``--checkpoint ./general`` is that
    folder, and its row is labelled plain BM25 with a warning."""
    from bm25aug.model.static import StaticQueryModel

    StaticQueryModel.from_tokenizer(None, use_weights=False, use_augmentation=False,
                                    target="flat").save_pretrained(tmp_path / "general" / "best")
    dataset = str(tiny_wp[0].path)
    common = ["--dataset", dataset, "--method", "augmented", "--no-companions", "--index-root", str(tmp_path / "idx")]
    named = _run([str(ROOT / "eval.py"), *common, "--checkpoint", "general"], tmp_path)
    assert named.returncode == 0, named.stderr
    assert f"augmented: the packaged model general ({GENERAL})" in named.stdout, named.stdout
    assert "exists and is not used" in named.stderr and "plain BM25" not in named.stdout + named.stderr
    local = _run([str(ROOT / "eval.py"), *common, "--checkpoint", "./general"], tmp_path)
    assert local.returncode == 0, local.stderr
    row = [line for line in local.stdout.splitlines() if line.startswith("augmented: ")]
    assert row == [f"augmented: the model in {(tmp_path / 'general' / 'best').resolve()} (a folder, not a packaged "
                   f"model); its term lists are the queries' own terms: this row is plain BM25"], local.stdout
    warned = [line for line in local.stderr.splitlines() if "the model changed nothing" in line]
    assert len(warned) == 1 and "bm25-flat" in warned[0], local.stderr


def test_plain_bm25_is_told_from_a_model_that_changes_the_query(tiny_wp):
    """The check behind the label: the queries' own terms (any one factor) are plain BM25; an
    added, dropped or reweighted term is not; no terms at all is nothing to say."""
    from bm25aug.eval.checkpoints import plain_bm25
    from bm25aug.search.bm25 import BM25Searcher

    bm25 = BM25Searcher(tiny_wp[2], flavor="flat")
    queries = [*TINY_QUERIES.values(), "the lions and lions"]
    own = [bm25.indexed(bm25.query_terms(q)) for q in queries]
    assert plain_bm25(bm25, queries, own)
    assert plain_bm25(bm25, queries, [{t: 2.5 * w for t, w in terms.items()} for terms in own])
    added, dropped, reweighted = ([dict(t) for t in own] for _ in range(3))
    added[-1]["cat"] = 0.5
    dropped[0].pop(next(iter(dropped[0])))
    reweighted[2]["cat"] *= 1.5  # (one term alone reweighted ranks as before: still plain)
    for lists in (added, dropped, reweighted):
        assert not plain_bm25(bm25, queries, lists)
    assert not plain_bm25(bm25, ["", "   "], [{}, {}])


def test_adapt_refuses_init_from_the_package_before_any_work(tmp_path, tiny_wp):
    """G6: ``adapt --init-from general`` is refused before the index, pseudo-queries or teacher."""
    corpus = tiny_wp[0].path / "corpus.jsonl"
    out = _run(["-m", "bm25aug.cli", "adapt", "--corpus", str(corpus), "--output-dir", str(tmp_path / "run"),
                "--init-from", "general", "--index-root", str(tmp_path / "idx")], tmp_path)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "general is a packaged model" in lines[0] and "fix:" in lines[0], out.stderr
    assert not (tmp_path / "idx").exists() and not (tmp_path / "run").exists()


def test_the_build_command_still_refuses_an_unknown_name():
    """G26: ``python -m bm25aug.model.packaged`` (now in bm25aug.model.package_build) as before."""
    out = _run(["-m", "bm25aug.model.packaged", "nosuch"], ROOT)
    assert out.returncode == 2 and "invalid choice: 'nosuch'" in out.stderr, out.stderr
