"""Models shipped inside the package, by name: ``AugmentedSearcher.from_pretrained("general", index)``.

A packaged model is a runtime-only folder under ``bm25aug/models/NAME/``: what search reads and
nothing else, so that it is small enough for the repository and the wheel. Its int8 ONNX query
encoder (``model.int8.onnx``), the model's settings (``bm25aug_config.json``), the tokenizer's
files, its card (``README.md``: what it was trained on, each set's license, what it scored) and
``package.json`` (the run it was cut from, the recorded command that rebuilds it, and the size and
digest of every file the runtime reads, checked when it loads: ``check_files``). It has no torch
weights, so it serves (``onnx-int8``) but cannot be trained from; its run folder, made by that
command (``bm25aug.model.package_build``), can.

The bare name of a packaged model (the string ``"general"``) means that model, as a Hugging Face
id or a Pyserini prebuilt index's name does; a folder of that name is used only when written as a
path (``./general``, ``general/``, an absolute path, a ``Path``). When such a path exists in the
working directory, a warning names it. ``$BM25AUG_CHECKPOINT_ROOT`` is not searched for names.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.io import open_regular
from bm25aug.model.config import CONFIG_NAME

log = logging.getLogger(__name__)
PACKAGED_ROOT = Path(__file__).resolve().parents[1] / "models"
ONNX_FILE = "model.int8.onnx"  # the int8 query encoder, packaged or exported (bm25aug.model.onnx_encoder)
PACKAGE_FILE = "package.json"
TOKENIZER_FILE = "tokenizer.json"
RUNTIME = "onnx-int8"  # the only runtime a packaged model ships
# Files package.json must list: without any of them the model does not load, or loads as another.
REQUIRED = (ONNX_FILE, CONFIG_NAME, TOKENIZER_FILE)
RECORD_LIMIT = 1 << 20  # bytes of package.json read at most (it is under 2 KB)
CHUNK = 1 << 22  # bytes a read while a file's digest is computed
# How each packaged model is made: the recipe trained (its datasets are the training data, every
# one under a license in SHIPPABLE) and the run folder it is cut from (bm25aug.model.package_build),
# or, with "cut_from", another packaged model whose graph is cut to "outputs" (no training).
# `general` is the first release, `general-1`, served without its a(q) head: on corpora it never
# saw, a(q) added nothing to the gain (docs/results.md, the packaged model).
# `general-fast` is a 1-layer student of `general` that starts from general's own first layer
# (bm25aug.train.distill --start teacher), w alone: docs/results.md, the fast general model.
BUILDS = {"general-1": {"recipe": "general-open", "run": "runs/general-open"},
          "general": {"recipe": "general-open", "run": "runs/general-open", "cut_from": "general-1",
                      "outputs": ["token_weights"]},
          "general-fast": {"recipe": "general-open", "run": "runs/general-fast", "teacher": "general", "layers": 1,
                           "hidden": 384, "start": "teacher", "keep": "0", "epochs": 3, "pseudo_queries": 8000,
                           "batch_size": 64, "lr": 0.001, "margin": 0.1, "aug_weight": 0.0, "seed": 7,
                           "threads": 1}}
# Licenses under which a model trained on the data may ship inside an Apache-2.0 package. CC BY
# asks for attribution, which the card gives; non-commercial, academic-only and share-alike terms
# are left out (share-alike on a model's weights is in doubt).
SHIPPABLE = ("CC BY 4.0",)
_named: set[tuple[str, str]] = set()  # (name, working directory) whose shadowing path was named already


def names() -> list[str]:
    """The models this package ships."""
    return sorted(set(BUILDS) | {p.name for p in PACKAGED_ROOT.glob("*") if (p / PACKAGE_FILE).is_file()})


def resolve(name_or_path: str | Path) -> Path:
    """The model folder an argument names: the packaged model for its bare name (a ``str``: "general"),
    else the path as given. A path of that bare name in the working directory is not used; a
    warning (once a process) names it and how to pass it."""
    if not (isinstance(name_or_path, str) and name_or_path in names()):
        return Path(name_or_path)
    if os.path.lexists(name_or_path) and (name_or_path, os.getcwd()) not in _named:
        _named.add((name_or_path, os.getcwd()))
        log.warning("%s: using the packaged model (%s); ./%s exists and is not used; fix: pass ./%s to use that "
                    "%s", name_or_path, PACKAGED_ROOT / name_or_path, name_or_path, name_or_path,
                    "folder" if os.path.isdir(name_or_path) else "path")
    return PACKAGED_ROOT / name_or_path


def is_packaged(folder: Path) -> bool:
    """Whether ``folder`` is a runtime-only packaged model (an ONNX encoder and no torch weights):
    it holds ``package.json`` (as anything: ``check_files`` says what is wrong with it), or it is
    one of the package's own folders (whole or not)."""
    folder = Path(folder)
    return os.path.lexists(folder / PACKAGE_FILE) or folder.resolve().parent == PACKAGED_ROOT


def check_packaged(folder: Path, runtime: str) -> Path:
    """The ONNX file of a packaged model, once the runtime asked for is the one it ships and every
    file it reads is the one it shipped (``check_files``)."""
    if runtime != RUNTIME:
        raise UserError(f"{folder.name} is a packaged model that ships only its {RUNTIME} query encoder, not "
                        f"{runtime}; fix: drop --runtime (or pass {RUNTIME}), or use its full model, {full_model(folder)}")
    check_files(folder)
    return folder / ONNX_FILE


def check_files(folder: Path) -> dict:
    """``package.json`` of a packaged model, once every file it lists (``files``: each one's
    ``bytes`` and ``blake2b``) is a regular file of that size and digest. Nothing is read past a
    file's recorded size, so that a link to a device or a FIFO cannot hang the check."""
    record = _record(folder)
    for name, expected in record["files"].items():
        try:
            data_digest = _digest(folder / name, expected["bytes"])
        except OSError as e:
            raise damaged(folder, name, "missing" if isinstance(e, FileNotFoundError) else e.strerror or str(e))
        if data_digest != expected["blake2b"]:
            raise damaged(folder, name, "not the file it shipped: its checksum differs")
    return record


def damaged(folder: Path, file: str, why: str) -> UserError:
    """The one-line error of a packaged model whose ``file`` is missing or damaged."""
    return UserError(f"the packaged model {folder.name} in {folder} is incomplete or damaged ({file}: {why}); fix: "
                     f"restore the folder from the release or checkout it came with (git checkout -- {folder}), or "
                     f"reinstall bm25aug")


def _record(folder: Path) -> dict:
    """``package.json``, checked to list ``REQUIRED`` among its files, each with a size and a digest."""
    try:
        record = json.loads(_read(folder / PACKAGE_FILE, RECORD_LIMIT).decode("utf-8"))
    except FileNotFoundError:
        raise damaged(folder, PACKAGE_FILE, "missing") from None
    except OSError as e:
        raise damaged(folder, PACKAGE_FILE, e.strerror or str(e)) from None
    except ValueError as e:  # not JSON, not UTF-8
        raise damaged(folder, PACKAGE_FILE, f"{type(e).__name__}: {str(e)[:120]}") from None
    if problem := _record_problem(record):
        raise damaged(folder, PACKAGE_FILE, problem)
    return record


def _record_problem(record) -> str | None:
    """What makes a parsed ``package.json`` unusable, if anything."""
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict):
        return "it lists no files with their digests"
    for name, entry in files.items():
        if name != Path(name).name or name in ("", ".", ".."):
            return f"{name!r} is not a file name"
        if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
                and isinstance(entry.get("blake2b"), str)):
            return f"the entry of {name} has no bytes and blake2b"
    if missing := [name for name in REQUIRED if name not in files]:
        return f"it lists no {', '.join(missing)}"
    return None


def _read(path: Path, limit: int) -> bytes:
    """A regular file's bytes, refused beyond ``limit``."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(0, f"over {limit} bytes")
    return data


def _digest(path: Path, size: int) -> str:
    """blake2b (16 bytes, as ``bm25aug.io.digest``) of a regular file that holds ``size`` bytes;
    at most ``size`` + 1 bytes are read."""
    h, seen = hashlib.blake2b(digest_size=16), 0
    with open_regular(path) as f:
        if (actual := os.fstat(f.fileno()).st_size) != size:
            raise OSError(0, f"{actual} bytes, not the {size} it shipped")
        while seen <= size and (chunk := f.read(min(CHUNK, size + 1 - seen))):
            h.update(chunk)
            seen += len(chunk)
    if seen != size:
        raise OSError(0, f"{seen} bytes read, not the {size} it shipped (it changed while read)")
    return h.hexdigest()


def file_record(path: Path) -> dict:
    """A file's entry in ``package.json``'s ``files``: its size and digest."""
    from bm25aug.io import digest

    return {"bytes": path.stat().st_size, "blake2b": digest(path)}


def full_model(folder: Path) -> str:
    """Where the full (torch) model a packaged one was cut from is, and the command that makes it."""
    run = BUILDS.get(folder.name, {}).get("run", "its run folder")
    return f"{run}/best (made by `python -m bm25aug.model.packaged {folder.name}`)"


if __name__ == "__main__":  # the command package.json records; the build itself is apart from the runtime
    from bm25aug.model.package_build import main

    main()
