"""The dense peer's model folders, damaged (hostile-user probe, round six: D10-D13, D15, MC3, MC5,
SV8): each damage is one line naming the file and the fix, before any work. A fetched folder's
checksums are checked before its tokenizer is parsed; a tokenizer or graph that cannot be read, a
record that lists no checksums, another model's graph and a file that is not a regular file (a
FIFO) are each refused as such; a folder in bm25aug's own cache whose record was deleted is to be
deleted (it is fetched again), never deleted by bm25aug."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from bm25aug.dense import fetch
from bm25aug.dense.loading import load_folder
from bm25aug.dense.models import BGE
from bm25aug.errors import UserError

PACKAGED_GENERAL_ONNX = Path(fetch.__file__).resolve().parents[1] / "models" / "general" / "model.int8.onnx"


@pytest.fixture(scope="module")
def fetched() -> Path:
    """bm25aug's own fetched bge-small-en-v1.5 folder (downloaded once, pinned)."""
    return fetch.model_folder(quiet=True)


def copy_of(fetched: Path, to: Path, record: bool = True) -> Path:
    """A copy of the fetched folder: its tokenizer and record copied, its graph a link to the
    fetched one (replace the link, never write through it)."""
    to.mkdir(parents=True)
    shutil.copy(fetched / fetch.TOKENIZER_FILE, to / fetch.TOKENIZER_FILE)
    if record:
        shutil.copy(fetched / fetch.RECORD, to / fetch.RECORD)
    (to / fetch.ONNX_FILE).symlink_to(fetched / fetch.ONNX_FILE)
    return to


def replace(path: Path, data: bytes | None = None, fifo: bool = False) -> None:
    path.unlink()
    if fifo:
        os.mkfifo(path)
    else:
        path.write_bytes(data)


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert error.type is UserError and "\n" not in text and "; fix: " in text, text
    return text


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------ D13, MC3, SV8: the tokenizer
@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_tokenizer_in_a_fetched_folder_fails_its_checksum_before_it_is_parsed(fetched, tmp_path, damage):
    folder = copy_of(fetched, tmp_path / "bge")
    tokenizer = folder / fetch.TOKENIZER_FILE
    if damage == "flip":
        flip(tokenizer, 300_000)  # invalid UTF-8: the tokenizers library's own parse error before
    else:
        tokenizer.write_bytes(tokenizer.read_bytes()[:1000])
    with pytest.raises(Exception) as error:
        load_folder(folder)
    text = one_line(error)
    assert f"{tokenizer} does not match the checksum in {folder / fetch.RECORD}" in text and f"delete {folder}" in text


def test_a_tokenizer_that_cannot_be_parsed_in_a_users_folder_is_one_line(fetched, tmp_path):
    folder = copy_of(fetched, tmp_path / "mine", record=False)
    (folder / fetch.TOKENIZER_FILE).write_text('{"version":"1.0","model":{}}')
    with pytest.raises(Exception) as error:
        load_folder(folder, BGE)
    text = one_line(error)
    assert f"{folder / fetch.TOKENIZER_FILE} cannot be read as a tokenizer (Exception: " in text
    assert "fix: restore that file" in text and "delete" not in text  # no record: the user's own folder


# ------------------------------------------------------------------ D10-D12: the graph and the record
@pytest.mark.parametrize("size", [0, 5_000_000])
def test_an_empty_or_truncated_graph_in_a_users_folder_is_one_line(fetched, tmp_path, size):
    folder = copy_of(fetched, tmp_path / "mine", record=False)
    onnx = folder / fetch.ONNX_FILE
    replace(onnx, (fetched / fetch.ONNX_FILE).open("rb").read(size))
    with pytest.raises(Exception) as error:
        load_folder(folder, BGE)
    text = one_line(error)
    assert f"{onnx} cannot be loaded (Invalid" in text and "delete" not in text


def test_a_record_that_lists_no_checksums_is_damaged(fetched, tmp_path):
    folder = copy_of(fetched, tmp_path / "bge")
    replace(folder / fetch.ONNX_FILE, (fetched / fetch.ONNX_FILE).open("rb").read(5_000_000))
    record = json.loads((folder / fetch.RECORD).read_text())
    del record["files"]
    (folder / fetch.RECORD).write_text(json.dumps(record))
    with pytest.raises(Exception) as error:
        load_folder(folder)
    text = one_line(error)
    assert f"{folder / fetch.RECORD} lists no checksum for model.onnx, tokenizer.json" in text


def test_another_models_graph_is_refused_by_its_output_before_any_text_is_encoded(fetched, tmp_path):
    folder = copy_of(fetched, tmp_path / "mine", record=False)
    replace(folder / fetch.ONNX_FILE, PACKAGED_GENERAL_ONNX.read_bytes())  # inputs input_ids, attention_mask
    with pytest.raises(Exception) as error:
        load_folder(folder, BGE)
    text = one_line(error)
    assert "output token_weights is [batch, tokens], not [batch, tokens, 384]" in text


def test_the_fetched_graph_passes_the_output_check(fetched, tmp_path):
    model = load_folder(copy_of(fetched, tmp_path / "bge"))
    assert model.encode_queries(["vitamin"]).shape == (1, 384)


# ------------------------------------------------------------------ D15: not a regular file
@pytest.mark.parametrize("name", [fetch.RECORD, fetch.ONNX_FILE, fetch.TOKENIZER_FILE])
def test_a_fifo_in_a_model_folder_is_named_as_such(fetched, tmp_path, name):
    folder = copy_of(fetched, tmp_path / "bge")
    replace(folder / name, fifo=True)
    with pytest.raises(Exception) as error:
        load_folder(folder)
    assert f"{folder / name} cannot be read (a FIFO, not a regular file)" in one_line(error)


# ------------------------------------------------------------------ MC5: bm25aug's own cache
def test_a_cached_folder_without_its_record_is_to_be_deleted_and_is_kept(fetched, tmp_path, monkeypatch):
    jar = tmp_path / "m2" / fetch.BGE_SMALL.layout  # the verified jar, were it needed
    jar.parent.mkdir(parents=True)
    jar.symlink_to(fetch.fetch_jar(quiet=True))
    monkeypatch.setattr(fetch, "CACHE_ROOT", tmp_path / "cache")
    monkeypatch.setattr(fetch, "MAVEN_LOCAL", tmp_path / "m2")
    folder = copy_of(fetched, tmp_path / "cache" / fetch.MODELS / fetch.BGE_SMALL.folder_name, record=False)
    with pytest.raises(Exception) as error:
        fetch.model_folder(quiet=True)
    text = one_line(error)
    assert f"fix: delete {folder} (" in text and "fetched again" in text and "move that folder away" not in text
    assert sorted(p.name for p in folder.iterdir()) == [fetch.ONNX_FILE, fetch.TOKENIZER_FILE]


# ------------------------------------------------------------------ the SPLADE peer shares the check
def test_a_splade_record_that_lists_no_checksums_is_damaged(tmp_path):
    from bm25aug.dense.splade import load_splade_model
    from bm25aug.dense.splade_fetch import splade_folder

    folder = tmp_path / "splade"
    shutil.copytree(splade_folder(quiet=True), folder)
    record = json.loads((folder / fetch.RECORD).read_text())
    del record["files"]
    (folder / fetch.RECORD).write_text(json.dumps(record))
    with pytest.raises(Exception) as error:
        load_splade_model(folder)
    assert f"{folder / fetch.RECORD} lists no checksum for" in one_line(error)


def test_a_splade_tokenizer_that_cannot_be_parsed_in_a_users_folder_is_one_line(tmp_path):
    """The review's case: a user's SPLADE folder (no record) whose tokenizer.json the tokenizers
    library rejects with a bare Exception was a traceback; it is one line naming what failed."""
    from bm25aug.dense.splade import load_splade_model
    from bm25aug.dense.splade_fetch import splade_folder

    folder = tmp_path / "splade"
    shutil.copytree(splade_folder(quiet=True), folder)
    (folder / fetch.RECORD).unlink()
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["model"] = {"type": "WordPiece"}  # valid JSON, not a tokenizer: the library's bare Exception
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(UserError) as error:
        load_splade_model(folder)
    assert f"{folder} holds no tokenizer transformers can load (Exception" in one_line(error)


def test_a_fifo_config_in_a_transformers_folder_names_that_file_once(tmp_path):
    """The review's case: a FIFO ``config.json`` in a transformers folder (all-MiniLM-L6-v2's) was
    reported as the weights failing, with the FIFO's own error and two fixes inside it."""
    from bm25aug.dense.loading import load_folder
    from bm25aug.dense.models import MINILM
    from bm25aug.tokenization import offline_model_path

    folder = tmp_path / "minilm"
    folder.mkdir()
    for path in Path(offline_model_path()).iterdir():  # links to the package's files; config.json replaced
        if path.is_file():
            (folder / path.name).symlink_to(path)
    replace(folder / "config.json", fifo=True)
    with pytest.raises(UserError) as error:
        load_folder(folder, MINILM)
    said = one_line(error)
    assert said.startswith(f"{folder / 'config.json'} cannot be read (a FIFO, not a regular file)"), said
    assert said.count("fix:") == 1
