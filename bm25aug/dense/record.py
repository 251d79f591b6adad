"""A model folder's record, ``bm25aug-dense.json`` (``RECORD``), and the files it vouches for.

The pinned fetches write the record when they extract a model (``bm25aug.dense.pinned``): what the
folder holds (its kind, where it came from) and the blake2b of each file. Both peers check it
before any file is parsed (``bm25aug.dense.models``, ``bm25aug.dense.splade``): a file whose
checksum differs, and a record that lists no checksum for a file the model loads, are refused in
one line (a damaged record never skips the check). A folder without a record is a user's, and its
files are taken as they are.

The record and every model file are read only once they are regular files (a link is followed):
a FIFO, a device or a folder in a file's place is refused as such, never waited on
(``bm25aug.model.packaged`` reads a packaged model's files the same way).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.io import digest, open_regular

RECORD = "bm25aug-dense.json"  # a model folder's own record of what it holds (kind, source, files' blake2b)
RECORD_LIMIT = 1 << 20  # bytes of a record read at most (the fetch's are under 1 KB)


def restore(folder: Path, what: str = "the file") -> str:
    """The fix for a damaged file of a model folder: one with a record (a fetched one, or a copy)
    is fetched again when deleted; a user's own folder (no record) is theirs to restore."""
    if os.path.lexists(folder / RECORD):
        return f"delete {folder} if bm25aug fetched it (it is fetched again), else restore {what}"
    return f"restore {what}"


def regular(path: Path, folder: Path) -> Path:
    """``path``, once it is a regular file that can be opened; else one line naming why not."""
    try:
        open_regular(path).close()
    except OSError as e:
        raise UserError(f"{path} cannot be read ({e.strerror or e}); fix: {restore(folder)}") from None
    return path


def folder_record(folder: Path) -> dict:
    """The folder's record (``{}`` when it has none), read only as a regular file."""
    path = folder / RECORD
    if not os.path.lexists(path):
        return {}
    try:
        with open_regular(path) as f:
            raw = f.read(RECORD_LIMIT + 1)
        if len(raw) > RECORD_LIMIT:
            raise ValueError(f"over {RECORD_LIMIT} bytes")
        record = json.loads(raw.decode("utf-8"))
    except OSError as e:
        raise UserError(f"{path} cannot be read ({e.strerror or e}); fix: {restore(folder, 'that file')}") from None
    except ValueError:  # not JSON, not UTF-8, too long
        raise UserError(f"{path} is not a readable record; fix: {restore(folder, 'that file')}") from None
    if not isinstance(record, dict):
        raise UserError(f"{path} is not a record (a JSON object); fix: {restore(folder, 'that file')}")
    return record


def checked_digests(folder: Path, loaded: Iterable[Path], others: Iterable[Path] = ()) -> dict[str, str]:
    """The blake2b of the files the model loads (``loaded``) and of the folder's ``others`` it
    reads, by name. A folder with a record is refused unless the record lists a checksum for each
    loaded file and every file it lists matches (a listed file that is missing is damage too)."""
    record, loaded = folder_record(folder), list(loaded)
    digests = {p.name: digest(regular(p, folder)) for p in [*loaded, *others]}
    if not record:
        return digests
    recorded = record.get("files")
    listed = recorded if isinstance(recorded, dict) else {}
    unlisted = [p.name for p in loaded if not isinstance(listed.get(p.name), str)]
    if unlisted or any(name != Path(name).name or name in ("", ".", "..") for name in listed):
        raise UserError(f"{folder / RECORD} lists no checksum for {', '.join(unlisted) or 'its files by name'} "
                        f"(damaged); fix: {restore(folder, 'that file')}")
    for name, value in listed.items():
        if digests.get(name) != value:
            raise UserError(f"{folder / name} does not match the checksum in {folder / RECORD} (damaged, changed "
                            f"or missing); fix: {restore(folder)}")
    return digests
