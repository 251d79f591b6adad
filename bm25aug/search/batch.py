"""Batch search: queries prepared in chunks, each while the one before searches, in pieces, on the Java pool.

Preparing a chunk is Python's part (tokenizing, or encoding with the query model); searching it
is Lucene's, on ``threads`` Java threads without the GIL (``bm25aug.lucene.batch``), in pieces
of ``PIECE`` queries. With two chunks in flight the CPU is never idle between the two; a Ctrl-C
returns at once (the pieces Java has started finish in the background; those still queued
never run); a progress bar (on a terminal) moves piece by piece.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Callable, Sequence

from bm25aug.errors import UserError
from bm25aug.limits import check
from bm25aug.ranking import EMPTY, TopK
from bm25aug.backend import Index
from bm25aug.model.encoder import WINDOW
from bm25aug.progress import progress

# Queries prepared together: the query encoder's window, so that a query is encoded with the same
# neighbours whether a batch search or an export encodes it (bm25aug.model.encoder.encode_queries).
CHUNK = WINDOW
# Queries a search on the Java pool: a prepared chunk goes in pieces, each ranked (Anserini's order,
# in Python) while the pieces after it search, so that at the end of a batch Java waits for the
# ranking of one piece, not of a whole chunk (300 SciFact queries on two threads, alternating
# runs: 4,065-4,317 against 3,499-3,886 QPS with whole chunks; docs/speed.md, "Two threads").
PIECE = 64


def check_qids(items: Sequence, qids: Sequence[str]) -> None:
    """One unique qid per query (a repeated one would overwrite another's run)."""
    if len(items) != len(qids):
        raise UserError(f"got {len(items)} queries but {len(qids)} qids; fix: pass one qid per query")
    if len(set(qids)) != len(qids):
        repeated = next(q for q, n in Counter(qids).items() if n > 1)
        raise UserError(f"qid {repeated!r} is given to more than one query (their runs would overwrite each other); "
                        f"fix: pass one unique qid per query")


class _Piece:
    """Up to ``PIECE`` prepared queries on the Java pool: the non-empty items searched, the rest no hits."""

    def __init__(self, index: Index, kind: str, texts: list, k: int, threads: int):
        self.size, self.at = len(texts), [i for i, t in enumerate(texts) if t]
        self.pending = index.submit(kind, [texts[i] for i in self.at], k, threads)

    def result(self) -> list[TopK]:
        tops = [EMPTY] * self.size
        for i, top in zip(self.at, self.pending.result()):
            tops[i] = top
        return tops


def search_chunks(index: Index, kind: str, prepare: Callable[[list], list], items: list,
                  k: int, threads: int, desc: str | None = None, chunk: int = CHUNK) -> list[TopK]:
    """Each item's top k: ``prepare`` turns a chunk of ``chunk`` items into what the Java pool
    searches for ``kind`` (query texts, or term lists' elements: ``bm25aug.lucene.reader``; None:
    nothing to search, no hits), and the chunk searches, in pieces, while the next one is prepared.
    The result equals searching each prepared item alone, on any number of threads. A smaller
    ``chunk`` starts Java sooner (``PIECE``: for a ``light`` encoder, whose lists any chunking
    leaves alone)."""
    check("k", k)
    check("threads", threads)
    tops: list[TopK] = []
    running: deque[_Piece] = deque()  # the chunk before's pieces still to rank, and the chunk just submitted's
    with progress(total=len(items), desc=desc, unit="q", disable=desc is None) as bar:
        try:
            for start in range(0, len(items) + chunk, chunk):
                fresh = 0  # pieces of the chunk submitted now, left running while the next one is prepared
                if start < len(items):
                    texts = prepare(items[start:start + chunk])
                    for at in range(0, len(texts), PIECE):
                        running.append(_Piece(index, kind, texts[at:at + PIECE], k, threads))
                        fresh += 1
                while len(running) > fresh:
                    done = running.popleft()
                    tops += done.result()
                    bar.update(done.size)
        except BaseException:  # a Ctrl-C or an error: the pieces in flight are dropped
            for piece in running:
                piece.pending.cancel()
            raise
    return tops
