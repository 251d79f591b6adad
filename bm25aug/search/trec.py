"""TREC run files: ``qid Q0 docid rank score tag`` lines, written atomically and read strictly."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Iterator

import numpy as np

from bm25aug.errors import UserError
from bm25aug.io import atomic_write_text, read_lines
from bm25aug.limits import ID_RULE, run_id_ok
from bm25aug.ranking import TopK
from bm25aug.search.hits import Hit

log = logging.getLogger(__name__)


def _check_ids(ids) -> None:
    """An id holding whitespace would shift the columns: an error, not a file no tool reads right."""
    if (bad := next((i for i in ids if not run_id_ok(i)), None)) is not None:
        raise UserError(f"id {bad!r} {ID_RULE}")


def _lines(qid: str, docids: list[str], scores: list[float], tag: str) -> Iterator[str]:
    return (f"{qid} Q0 {d} {rank} {s:.6f} {tag}\n" for rank, (d, s) in enumerate(zip(docids, scores), 1))


def trec_lines(run: dict[str, list[Hit]], tag: str = "bm25aug") -> Iterator[str]:
    """``qid Q0 docid rank score tag`` lines of a run of ``Hit``s."""
    _check_ids(set(run) | {h.docid for hits in run.values() for h in hits})
    return (line for qid, hits in run.items() for line in _lines(qid, [h.docid for h in hits], [h.score for h in hits], tag))


def array_lines(qids: list[str], tops: list[TopK], docids: np.ndarray, tag: str = "bm25aug") -> Iterator[str]:
    """The same lines straight from batch search's arrays (``TopK`` per query, ``docids`` the
    index's id table): no ``Hit`` per hit."""
    hit = np.unique(np.concatenate([top.lucene_ids for top in tops])) if tops else np.zeros(0, np.int64)
    _check_ids([*qids, *docids[hit].tolist()])
    return (line for qid, top in zip(qids, tops)
            for line in _lines(qid, docids[top.lucene_ids].tolist(), top.scores.tolist(), tag))


def write_trec_run(run: dict[str, list[Hit]], path: str | Path, tag: str = "bm25aug") -> None:
    """A TREC run file (``trec_lines``), written to a temp file and renamed."""
    atomic_write_text(path, "".join(trec_lines(run, tag)))


def write_trec_arrays(qids: list[str], tops: list[TopK], docids: np.ndarray, path: str | Path,
                      tag: str = "bm25aug") -> None:
    """A TREC run file from batch search's arrays (``array_lines``), written to a temp file and renamed."""
    atomic_write_text(path, "".join(array_lines(qids, tops, docids, tag)))


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


