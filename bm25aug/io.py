"""Safe file handling: atomic writes, no lost folders, no leftovers, clear errors on bad bytes.

* A file or folder appears complete under its final name, or not at all: it is written under a
  temporary sibling name ``.<name>.<kind>.<pid>.<random>`` and renamed.
* A temporary whose process is gone (killed, crashed) is removed by the next write of that name.
* An existing folder is replaced only when bm25aug wrote it (it holds the given marker file) or it
  is empty; anything else is refused with an error, never deleted.
* New files and folders get the usual permissions (0666/0777 less the umask), like ``open``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bm25aug.errors import UserError

TEMP_KINDS = ("tmp", "building", "old")
# Everything bm25aug derives once and reuses (datasets, ONNX exports, term maps, stock-index postings).
CACHE_ROOT = Path(os.environ.get("BM25AUG_CACHE", Path.home() / ".cache" / "bm25aug"))


def temp_sibling(path: Path, kind: str) -> Path:
    """A hidden sibling name that records the writing process, so stale ones can be recognized."""
    return path.with_name(f".{path.name}.{kind}.{os.getpid()}.{secrets.token_hex(4)}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(path: Path) -> int:
    """Remove temporaries of ``path`` left by processes that no longer run; returns how many."""
    removed = 0
    prefix = f".{path.name}."
    if not path.parent.is_dir():
        return 0
    for entry in path.parent.iterdir():
        if not entry.name.startswith(prefix):
            continue
        parts = entry.name[len(prefix):].split(".")
        if len(parts) != 3 or parts[0] not in TEMP_KINDS or not parts[1].isdigit() or _pid_alive(int(parts[1])):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed += 1
    return removed


def check_replaceable(path: Path, marker: str | None, what: str, fix: str) -> None:
    """Refuse to replace a folder that bm25aug did not write (no ``marker``) and is not empty;
    ``marker=None`` (a user's explicit ``--force``) replaces any folder."""
    if not path.exists() or (marker is None and path.is_dir()):
        return
    if not path.is_dir():
        raise UserError(f"{path} exists and is not a folder; bm25aug will not replace it; fix: {fix}")
    if (path / marker).exists() or not any(path.iterdir()):
        return
    raise UserError(f"{path} exists but is not {what} (no {marker}); bm25aug will not delete it; fix: {fix}")


@contextmanager
def atomic_dir(path: str | Path, marker: str | None, what: str = "a bm25aug folder",
               fix: str = "choose another path, or move that folder away") -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it takes the place of ``path`` in one rename.
    ``path`` may already exist only as a folder holding ``marker`` (one that bm25aug wrote)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    check_replaceable(path, marker, what, fix)
    tmp = temp_sibling(path, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        if path.exists():
            old = temp_sibling(path, "old")
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    tmp = temp_sibling(path, "tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def write_jsonl(path: str | Path, rows) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def check_output_path(path: str | Path, option: str) -> Path:
    """Fail before the work starts if ``path`` cannot be written as a file."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path} is a folder; fix: pass a file path, e.g. {path / 'out'}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: cannot write in {parent}; fix: pass a path in a writable folder")
    return path


def read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file, with an error naming the line when a line is not UTF-8."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"{path}:{lineno}: not valid UTF-8; fix: re-encode the file as UTF-8 "
                                f"(e.g. iconv -f latin1 -t utf-8)") from None
