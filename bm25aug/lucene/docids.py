"""The external-id table of an index: each Lucene doc number's stored ``id``, read once per index.

``docids.txt`` (one id a line) is written into an index bm25aug builds, with a record of the
index commit it was read from (``bm25aug.io.record_derived``); an index without one, or whose
commit changed since, has its ids read from the stored ``id`` field instead, a slice at a time.

The table is a numpy array of fixed-width unicode (``<U``) when it can hold every id exactly.
numpy drops trailing NUL characters from such strings, so a table with an id that ends in NUL is
kept as Python strings (``object``) instead: every id in it is exactly the id the index stores.
``LuceneIndex.doc_numbers`` relies on that to match only ids that are exactly stored ones.

Nothing here imports ``bm25aug.lucene.reader`` (which reads its table from here): callers hand in
an open ``IndexReader``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from bm25aug.errors import UserError
from bm25aug.io import atomic_open, derived_ok, digest, record_derived, source_key
from bm25aug.lucene.jvm import JNI_LOCK

ID_FIELD = "id"
DOCIDS_FILE = "docids.txt"
_ID_SLICE = 1 << 16  # stored ids read and written at a time


def id_array(ids: Sequence[str]) -> np.ndarray:
    """``ids`` as an array that holds each exactly: fixed-width unicode, or Python strings where
    an id ends in NUL (which fixed-width unicode would drop)."""
    exact = not any(i.endswith("\x00") for i in ids)
    return np.asarray(ids, dtype=str if exact else object)


def commit_key(index_dir: Path, reader) -> str:
    """What an index's id table is derived from: its commit (the newest ``segments_N`` file,
    which names every segment by a random id, so a rebuild never has the same one)."""
    from jnius import cast

    with JNI_LOCK:  # Pyserini hands its reader over as an IndexReader
        name = str(cast("org.apache.lucene.index.DirectoryReader", reader).getIndexCommit().getSegmentsFileName())
    return source_key("docids", name, digest(Path(index_dir) / name))


def read_docids(index_dir: Path, reader) -> np.ndarray:
    """External id of every Lucene doc: ``docids.txt`` when bm25aug wrote one for this very index
    commit and it is unchanged since (its record says so), else read from the stored ``id`` field
    (a stock index is never written to; a changed or damaged table is written again)."""
    index_dir = Path(index_dir)
    table = index_dir / DOCIDS_FILE
    with JNI_LOCK:
        n = int(reader.maxDoc())
    key = commit_key(index_dir, reader)
    if derived_ok(table, key):
        ids = table.read_text(encoding="utf-8").split("\n")[:-1]
        if len(ids) == n:
            return id_array(ids)
    ids = [docid for part in _stored_ids(index_dir, reader, n) for docid in part]
    if table.exists() and os.access(index_dir, os.W_OK):
        _write_table(index_dir, [ids], key)
    return id_array(ids)


def stored_values(reader, numbers: Sequence[int], field: str) -> list[str | None]:
    """The stored ``field`` of each Lucene doc number (None where the document stores none). The
    lock is taken per document, so a long read never stalls another thread's Java calls."""
    with JNI_LOCK:  # pyjnius calls on shared classes (bm25aug.lucene.reader's docstring)
        stored = reader.storedFields()
    values = []
    for n in numbers:
        with JNI_LOCK:
            values.append(stored.document(int(n)).get(field))
    return values


def _stored_ids(index_dir: Path, reader, n: int) -> Iterator[list[str]]:
    """The stored ``id`` of Lucene docs 0 to n - 1, a slice at a time, so that a build writes its
    table without holding every id (NQ's 21M as Python strings and one joined text: ~3 GB)."""
    for start in range(0, n, _ID_SLICE):
        ids = stored_values(reader, range(start, min(start + _ID_SLICE, n)), ID_FIELD)
        if any(i is None for i in ids):
            raise UserError(f"{index_dir} has documents without a stored '{ID_FIELD}' field; "
                            f"fix: index with Anserini/Pyserini's default document generator")
        yield ids


class _NotOneALine(Exception):
    """An id holds a newline, so the table cannot hold one id a line."""


def _write_table(index_dir: Path, parts: Iterable[list[str]], key: str) -> None:
    """``docids.txt`` and its record, written a slice of ids at a time; none when an id holds a
    newline (the ids are then read from the index on open)."""
    try:
        with atomic_open(index_dir / DOCIDS_FILE, "w") as f:
            for ids in parts:
                if any("\n" in d for d in ids):
                    raise _NotOneALine
                f.write("".join(f"{d}\n" for d in ids))
    except _NotOneALine:
        return
    record_derived(index_dir / DOCIDS_FILE, key)


def write_docids(index_dir: Path, reader) -> None:
    """Save the id table into a freshly built index (it is read on every open), streamed from
    the stored ids of ``reader``, an open reader of that index."""
    index_dir = Path(index_dir)
    with JNI_LOCK:
        n = int(reader.maxDoc())
    _write_table(index_dir, _stored_ids(index_dir, reader, n), commit_key(index_dir, reader))
