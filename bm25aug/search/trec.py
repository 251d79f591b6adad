"""TREC run files: ``qid Q0 docid rank score tag`` lines, written atomically and read strictly."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Iterator

from bm25aug.errors import UserError
from bm25aug.io import atomic_write_text, read_lines
from bm25aug.limits import run_id_ok
from bm25aug.search.bm25 import Hit

log = logging.getLogger(__name__)


def trec_lines(run: dict[str, list[Hit]], tag: str = "bm25aug") -> Iterator[str]:
    """``qid Q0 docid rank score tag`` lines of a run. An id holding whitespace would shift the
    columns: an error, not a file no tool reads right."""
    ids = set(run) | {h.docid for hits in run.values() for h in hits}
    if (bad := next((i for i in ids if not run_id_ok(i)), None)) is not None:
        raise UserError(f"id {bad!r} is empty or holds whitespace, which a TREC run file cannot hold; fix: give "
                        f"that query or document an id without spaces, tabs or newlines")
    return (f"{qid} Q0 {hit.docid} {rank} {hit.score:.6f} {tag}\n"
            for qid, hits in run.items() for rank, hit in enumerate(hits, 1))


def write_trec_run(run: dict[str, list[Hit]], path: str | Path, tag: str = "bm25aug") -> None:
    """A TREC run file (``trec_lines``), written to a temp file and renamed."""
    atomic_write_text(path, "".join(trec_lines(run, tag)))


def read_trec_run(path: str | Path) -> dict[str, list[Hit]]:
    """A TREC run file, hits sorted by score. NaN or infinite scores are an error; a document
    listed twice for a query is kept once (its first line), with a warning and a count."""
    run: dict[str, list[Hit]] = {}
    seen: set[tuple[str, str]] = set()
    repeated = 0
    for lineno, line in read_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 6:
            raise UserError(f"{path}:{lineno}: expected 'qid Q0 docid rank score tag'; fix: repair that line")
        try:
            score = float(parts[4])
        except ValueError:
            raise UserError(f"{path}:{lineno}: score {parts[4]!r} is not a number; fix: repair that line") from None
        if not math.isfinite(score):
            raise UserError(f"{path}:{lineno}: score {parts[4]!r} is not a finite number; fix: repair that line")
        if (parts[0], parts[2]) in seen:
            repeated += 1
            continue
        seen.add((parts[0], parts[2]))
        run.setdefault(parts[0], []).append(Hit(parts[2], score))
    if repeated:
        log.warning("%s: %d lines repeat a document already listed for that query; the first is kept", path, repeated)
    for hits in run.values():
        hits.sort(key=lambda h: -h.score)
    return run


