"""A corpus file read through an on-disk offset table, never held whole in memory.

NQ's 21M passages as a dict of Python objects take about 15 GB. ``Corpus`` instead scans the file
once, keeping each document's id (bytes, in one numpy array) and byte offset: about 20 bytes a
passage. It is a read-only ``Mapping[str, Document]``:

* iteration (``items()``, ``batches()``) streams the file in order;
* ``corpus[docid]`` (answer matching, hard-negative filters) seeks to the one line it needs;
* ``docid in corpus`` and ``len`` use the table alone.

Repeated ids keep their first line, with a warning and a count, as before. Every line is parsed
during the scan, so a malformed line is reported (with its line number) before any work starts.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from bm25aug.errors import UserError
from bm25aug.io import decode_line
from bm25aug.limits import ID_RULE, check_text, run_id_ok
from bm25aug.progress import progress

log = logging.getLogger(__name__)
_CHUNK = 1 << 16  # lines gathered as Python objects before they are packed into numpy


@dataclass
class Document:
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Title and text joined by one space, as Pyserini's BEIR regressions index them."""
        return f"{self.title} {self.text}"


def beir_row(line: str, where: str, fields: tuple[str, ...]) -> tuple[str, ...]:
    """One line of a BEIR JSONL file (corpus or queries): its ``_id`` (a string or a number) and
    the text ``fields`` (strings; missing or null: empty). Anything else names the line: a number
    or a list as a text reached the tokenizers as such."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: malformed JSON ({e.msg}); fix: repair or remove that line") from None
    if not isinstance(row, dict) or isinstance(row.get("_id"), bool) or not isinstance(row.get("_id"), (str, int)):
        raise UserError(f"{where}: expected a JSON object with a string \"_id\"; fix: repair that line")
    values = [row.get(f) or "" for f in fields]
    if bad := next((f for f, v in zip(fields, values) if not isinstance(v, str)), None):
        raise UserError(f"{where}: \"{bad}\" must be a string, not {type(row[bad]).__name__}; fix: repair that line")
    return (str(row["_id"]), *values)


def parse_beir(line: str, where: str) -> tuple[str, Document]:
    docid, title, text = beir_row(line, where, ("title", "text"))
    return docid, Document(title, text)


def parse_dpr(line: str, where: str) -> tuple[str, Document]:
    row = next(csv.reader([line], delimiter="\t"), [])
    if len(row) < 3:
        raise UserError(f"{where}: expected 3 tab-separated fields; fix: repair that line")
    return row[0], Document(row[2], row[1])


def parse_msmarco(line: str, where: str) -> tuple[str, Document]:
    pid, _, text = line.rstrip("\n").partition("\t")
    return pid, Document("", text)


def _checked(docid: str, doc: Document, line: str, where: str) -> bytes:
    """The id as stored in the offset table, once the document is known to be searchable and
    reportable: valid Unicode (a JSON escape can hold a lone surrogate, which Java rejects) and an
    id a TREC run or qrels line can hold (no whitespace: those files split on it)."""
    if "\\u" in line:
        for text in (docid, doc.title, doc.text):
            check_text(text, where)
    if not run_id_ok(docid):
        raise UserError(f"{where}: document id {docid!r} {ID_RULE}")
    return docid.encode("utf-8")


PARSERS: dict[str, Callable[[str, str], tuple[str, Document]]] = {
    "beir": parse_beir, "dpr": parse_dpr, "msmarco": parse_msmarco}


class Corpus(Mapping):
    """The documents of one corpus file (``layout``: beir, dpr or msmarco), by id."""

    def __init__(self, path: str | Path, layout: str):
        self.path, self.parse = Path(path), PARSERS[layout]
        self.header = layout == "dpr"  # DPR's passages start with "id<TAB>text<TAB>title"
        ids, offsets, lines = [], [], []
        packed: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

        def pack() -> None:
            packed.append((np.asarray(ids, dtype=bytes), np.asarray(offsets, np.int64), np.asarray(lines, np.int64)))
            for gathered in (ids, offsets, lines):
                gathered.clear()

        for lineno, offset, line in self._lines(desc=f"scan {self.path.name}"):
            ids.append(_checked(*self.parse(line, f"{self.path}:{lineno}"), line, f"{self.path}:{lineno}"))
            offsets.append(offset)
            lines.append(lineno)
            if len(ids) == _CHUNK:
                pack()
        pack()
        width = max(a.dtype.itemsize for a, _, _ in packed)
        all_ids = np.concatenate([a.astype(f"S{width}") for a, _, _ in packed])
        self._offsets = np.concatenate([o for _, o, _ in packed])
        self._lines_of = np.concatenate([n for _, _, n in packed])
        del packed
        order = np.argsort(all_ids, kind="stable")  # equal ids: file order, so the first line wins
        sorted_ids = all_ids[order]
        first = np.ones(len(order), bool)
        first[1:] = sorted_ids[1:] != sorted_ids[:-1]
        if not first.all():
            log.warning("%s: %d repeated document ids; the first copy of each is kept", self.path, int((~first).sum()))
        self._keep = np.zeros(len(order), bool)  # per line: is it the document its id names
        self._keep[order[first]] = True
        self._sorted_ids, self._sorted_lines = sorted_ids[first], order[first]

    def _lines(self, desc: str | None = None) -> Iterator[tuple[int, int, str]]:
        """(line number, byte offset, text) of every non-blank data line."""
        size = self.path.stat().st_size
        with open(self.path, "rb") as f, progress(total=size, desc=desc, unit="B", unit_scale=True,
                                                   disable=desc is None) as bar:
            offset = 0
            for lineno, raw in enumerate(f, 1):
                at, offset = offset, offset + len(raw)
                bar.update(len(raw))
                if lineno == 1 and self.header:
                    self._check_header(raw)
                    continue
                line = decode_line(raw, lineno, self.path)
                if line.strip():
                    yield lineno, at, line

    def _check_header(self, raw: bytes) -> None:
        header = decode_line(raw, 1, self.path).rstrip("\r\n").split("\t")
        if [h.strip() for h in header[:3]] != ["id", "text", "title"]:
            raise UserError(f"{self.path}: expected a header 'id<TAB>text<TAB>title'; fix: use DPR's passage format")

    def __len__(self) -> int:
        return len(self._sorted_ids)

    def _find(self, docid: str) -> int:
        """Line index (into the offset table) of ``docid``, or -1."""
        if not isinstance(docid, str) or not len(self._sorted_ids) or "\x00" in docid:
            return -1  # (numpy's fixed-width bytes compare "4983\x00" equal to "4983"; no stored id holds a NUL)
        key = docid.encode("utf-8")
        at = int(np.searchsorted(self._sorted_ids, key))
        return int(self._sorted_lines[at]) if at < len(self._sorted_ids) and self._sorted_ids[at] == key else -1

    def has(self, docids) -> np.ndarray:
        """Whether each of many ids is in the corpus, in one vectorized look-up."""
        # numpy's fixed-width strings drop trailing NULs ("4983\x00" would be "4983"), and no stored id
        # holds one; an id table already in such an array (an index's, the common caller) holds none
        if isinstance(docids, np.ndarray) and docids.dtype.kind == "U":
            clean = True
        else:
            docids = list(docids)
            clean = np.asarray([isinstance(d, str) and "\x00" not in d for d in docids], bool)
        keys = np.char.encode(np.asarray(docids, dtype=str), "utf-8")
        if not len(keys) or not len(self._sorted_ids):
            return np.zeros(len(keys), bool)
        at = np.minimum(np.searchsorted(self._sorted_ids, keys), len(self._sorted_ids) - 1)
        return (self._sorted_ids[at] == keys) & clean

    def __contains__(self, docid) -> bool:
        return self._find(docid) >= 0

    def __getitem__(self, docid: str) -> Document:
        line = self._find(docid)
        if line < 0:
            raise KeyError(docid)
        with open(self.path, "rb") as f:
            f.seek(int(self._offsets[line]))
            lineno = int(self._lines_of[line])
            return self.parse(decode_line(f.readline(), lineno, self.path), f"{self.path}:{lineno}")[1]

    def items(self) -> Iterator[tuple[str, Document]]:  # type: ignore[override]
        """(id, document) in file order, streamed; a repeated id's later lines are skipped."""
        for i, (lineno, _, line) in enumerate(self._lines()):
            if self._keep[i]:
                yield self.parse(line, f"{self.path}:{lineno}")

    def __iter__(self) -> Iterator[str]:
        return (docid for docid, _ in self.items())

    def batches(self, size: int) -> Iterator[list[tuple[str, Document]]]:
        """``items()`` in lists of at most ``size``: what indexing holds at once."""
        batch: list[tuple[str, Document]] = []
        for item in self.items():
            batch.append(item)
            if len(batch) == size:
                yield batch
                batch = []
        if batch:
            yield batch
