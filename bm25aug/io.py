"""Safe file handling: atomic writes, no lost folders, no leftovers, clear errors on bad bytes.

* A file or folder appears complete under its final name, or not at all: it is written under a
  temporary sibling name ``.<name>.<kind>.<pid>.<random>`` and renamed.
* A temporary whose process is gone (killed, crashed) is removed by the next write of that name.
* An existing folder is replaced only when bm25aug wrote it (it holds the given marker file) or it
  is empty; anything else is refused with an error, never deleted.
* New files and folders get the usual permissions (0666/0777 less the umask), like ``open``.
* Outputs are checked before any work against every input and every other output
  (``bm25aug.outputs.check_outputs``): nothing bm25aug writes can land on, or inside, what it reads.
* A derived file (a cache made from other files) is trusted only while its record names the same
  source and its bytes still match the record's checksum (``derived_ok``, ``record_derived``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Callable, Iterator

from bm25aug.errors import UserError

log = logging.getLogger(__name__)
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


_TEMP = re.compile(rf"^\.(?P<name>.+)\.(?:{'|'.join(TEMP_KINDS)})\.(?P<pid>\d+)\.[0-9a-f]+$")


def clean_stale(path: Path, every: bool = False) -> int:
    """Remove temporaries of ``path`` left by processes that no longer run; returns how many.
    ``every``: those of everything in the folder ``path`` (a claimed folder, whatever a killed
    writer was writing in it)."""
    folder = path if every else path.parent
    if not folder.is_dir():
        return 0
    removed = 0
    for entry in folder.iterdir():
        match = _TEMP.match(entry.name)
        if not match or (not every and match["name"] != path.name) or _pid_alive(int(match["pid"])):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed += 1
    return removed


def check_replaceable(path: Path, marker: str | tuple[str, ...] | None, what: str, fix: str) -> None:
    """Refuse to replace a folder that bm25aug did not write (none of the ``marker`` files) and is
    not empty; ``marker=None`` (a user's explicit ``--force``) replaces any folder."""
    if not path.exists() or (marker is None and path.is_dir() and not path.is_symlink()):
        return
    if path.is_symlink():
        raise UserError(f"{path} is a symbolic link (to {os.readlink(path)}); bm25aug will not replace it; fix: {fix}")
    if not path.is_dir():
        raise UserError(f"{path} exists and is not a folder; bm25aug will not replace it; fix: {fix}")
    markers = (marker,) if isinstance(marker, str) else marker
    if any((path / m).exists() for m in markers) or not any(path.iterdir()):
        return
    raise UserError(f"{path} exists but is not {what} (no {markers[0]}); bm25aug will not delete it; fix: {fix}")


LOCK_FILE = ".lock"


def refuse_foreign(path: str | Path, marker: str, option: str, adopt: Callable[[Path], bool] = lambda path: False) -> None:
    """Refuse a folder holding files bm25aug did not write: anything but a lock, unless it holds
    ``marker`` or ``adopt`` recognizes it (a folder an earlier release wrote without the marker)."""
    path = Path(path)
    fix = f"fix: pass a new or empty folder as {option}"
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path} is a file, not a folder; {fix}")
    if not path.is_dir() or (path / marker).exists():
        return
    foreign = sorted(e.name for e in path.iterdir() if e.name != LOCK_FILE)
    if foreign and not adopt(path):
        raise UserError(f"{option} {path} holds files bm25aug did not write ({', '.join(foreign[:3])}"
                        f"{', ...' if len(foreign) > 3 else ''}); bm25aug will not write over them; {fix}")


def claim_folder(path: str | Path, marker: str, what: str, option: str,
                 adopt: Callable[[Path], bool] = lambda path: False):
    """Make ``path`` this process's folder for ``what``: refuse one holding files bm25aug did not
    write (``refuse_foreign``), take its lock (held by another process: an error, never two
    writers mixing files), then write ``marker``. Returns the held ``filelock.FileLock``."""
    from filelock import FileLock, Timeout

    path = Path(path)
    refuse_foreign(path, marker, option, adopt)
    path.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path / LOCK_FILE))
    try:
        lock.acquire(timeout=1)  # (a second, not 0: lock_held probes the lock briefly)
    except Timeout:
        raise UserError(f"another bm25aug process is writing {what} into {path}; fix: wait for it to end, "
                        f"or pass another {option}") from None
    try:
        clean_stale(path, every=True)  # what a killed writer left in the folder (last/, best/, ...)
        if not (path / marker).exists():
            write_json(path / marker, {"written_by": "bm25aug", "what": what})
    except BaseException:
        lock.release()
        raise
    return lock


def lock_held(folder: str | Path) -> bool:
    """Whether another process holds ``folder``'s lock (``claim_folder``): a training run is
    writing it, and may replace what is in it (best/, last/) at any moment."""
    import fcntl

    try:
        fd = os.open(Path(folder) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # fails while a writer holds it exclusively
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


@contextmanager
def atomic_dir(path: str | Path, marker: str | tuple[str, ...] | None, what: str = "a bm25aug folder",
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


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """A file opened under a temporary sibling name, renamed to ``path`` when the block ends
    without error, removed when it does not (a stale one of a killed process is removed by the
    next write of that name)."""
    path = Path(os.path.realpath(path))  # a symbolic link: its target is written, the link stays
    if path.exists() and not path.is_file() and not path.is_dir():
        # A device, a FIFO or a terminal (/dev/null, /dev/stdout): written into, never replaced.
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    tmp = temp_sibling(path, "tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_open(path) as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def write_jsonl(path: str | Path, rows) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


# ------------------------------------------------------------------------------------ derived files
def digest(data: bytes | Path) -> str:
    """blake2b (16 bytes) of bytes, or of a file's bytes read in chunks."""
    h = hashlib.blake2b(digest_size=16)
    if isinstance(data, Path):
        with open(data, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    else:
        h.update(data)
    return h.hexdigest()


def source_key(*parts) -> str:
    """A key for what a derived file was made from: its inputs' hashes and the settings used."""
    return hashlib.blake2b(json.dumps(parts, sort_keys=True, default=str).encode(), digest_size=16).hexdigest()


def _record_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.source.json")


def record_derived(path: str | Path, source: str) -> None:
    """Record, beside ``path`` (already in place), what it was made from and its own checksum."""
    path = Path(path)
    write_json(_record_path(path), {"source": source, "blake2b": digest(path)})


def derived_ok(path: str | Path, source: str) -> bool:
    """Whether ``path`` may be reused: its record names ``source`` and its bytes are unchanged.
    A damaged or foreign file is logged and reported as not reusable, never read as if it were."""
    path, record = Path(path), _record_path(Path(path))
    if not path.is_file() or not record.is_file():
        return False
    try:
        saved = json.loads(record.read_text(encoding="utf-8"))
        if not isinstance(saved, dict) or saved.get("source") != source:
            log.info("%s was made from other inputs or settings; making it again", path)
            return False
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        log.warning("%s has an unreadable record; making it again", path)
        return False
    if saved.get("blake2b") != digest(path):
        log.warning("%s does not match its recorded checksum (changed or damaged); making it again", path)
        return False
    return True


def decode_line(raw: bytes, lineno: int, path: str | Path) -> str:
    """One line of a UTF-8 file as text: a byte-order mark on the first line (Windows editors
    write one) is dropped, and a line that is not UTF-8 is an error naming it."""
    if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}:{lineno}: not valid UTF-8; fix: re-encode the file as UTF-8 "
                        f"(e.g. iconv -f latin1 -t utf-8)") from None


def read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file (``decode_line``)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            yield lineno, decode_line(raw, lineno, path)


def open_regular(path: Path):
    """``path`` opened for reading, once it is a regular file (a link is followed); a folder, a
    device, a FIFO or a socket is an ``OSError`` (the open never waits: ``O_NONBLOCK``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket")
        raise OSError(0, f"{kind}, not a regular file")
    return os.fdopen(fd, "rb")


def keep_recent_files(folder: Path, keep: int, suffixes: tuple[str, ...] = (".npy", ".json")) -> None:
    """Only the ``keep`` most recently used of a cache's own files stay in ``folder``: those named
    by a 32-character key with one of ``suffixes`` (a reader touches a file it uses); nothing else
    in the folder is removed."""
    ours = [f for f in folder.iterdir() if f.is_file() and f.suffix in suffixes and len(f.stem) == 32]
    ours.sort(key=lambda f: f.stat().st_mtime, reverse=True)
    for f in ours[keep:]:
        f.unlink(missing_ok=True)
