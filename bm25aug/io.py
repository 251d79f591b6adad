"""Atomic writes: a file or directory appears complete under its final name, or not at all."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_dir(path: str | Path):
    """Yield a temporary sibling directory; on success it replaces ``path`` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp."))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def write_jsonl(path: str | Path, rows) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
