"""Batch search: many queries in chunks on the Java pool, each chunk prepared while the one before searches.

Preparing a chunk is Python's part (tokenizing, or encoding with the query model); searching it
is Lucene's, on ``threads`` Java threads without the GIL (``bm25aug.lucene.batch``). With two
chunks in flight the CPU is never idle between the two; a Ctrl-C returns at once (the queries
Java has started finish in the background, at most two chunks' worth); a progress bar (on a
terminal) moves chunk by chunk.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

from bm25aug.errors import UserError
from bm25aug.limits import check
from bm25aug.lucene.ranking import EMPTY, TopK
from bm25aug.lucene.reader import LuceneIndex
from bm25aug.model.encoder import WINDOW
from bm25aug.progress import progress

# Queries a chunk: the query encoder's window, so that a query is encoded with the same neighbours
# whether a batch search or an export encodes it (bm25aug.model.encoder.encode_queries).
CHUNK = WINDOW


def check_qids(items: Sequence, qids: Sequence[str]) -> None:
    """One unique qid per query (a repeated one would overwrite another's run)."""
    if len(items) != len(qids):
        raise UserError(f"got {len(items)} queries but {len(qids)} qids; fix: pass one qid per query")
    if len(set(qids)) != len(qids):
        repeated = next(q for q, n in Counter(qids).items() if n > 1)
        raise UserError(f"qid {repeated!r} is given to more than one query (their runs would overwrite each other); "
                        f"fix: pass one unique qid per query")


class _Chunk:
    """One chunk on the Java pool: its non-empty query texts searched, the rest no hits."""

    def __init__(self, index: LuceneIndex, kind: str, texts: list[str | None], k: int, threads: int):
        self.size, self.at = len(texts), [i for i, t in enumerate(texts) if t]
        self.pending = index.submit(kind, [texts[i] for i in self.at], k, threads)

    def result(self) -> list[TopK]:
        tops = [EMPTY] * self.size
        for i, top in zip(self.at, self.pending.result()):
            tops[i] = top
        return tops


def search_chunks(index: LuceneIndex, kind: str, prepare: Callable[[list], list[str | None]], items: list,
                  k: int, threads: int, desc: str | None = None) -> list[TopK]:
    """Each item's top k: ``prepare`` turns a chunk of items into Java query texts of ``kind``
    (None: nothing to search, no hits), and the chunk searches while the next one is prepared.
    The result equals searching each prepared text alone, on any number of threads."""
    check("k", k)
    check("threads", threads)
    tops: list[TopK] = []
    running: list[_Chunk] = []  # at most two: the one searching and the one just submitted
    with progress(total=len(items), desc=desc, unit="q", disable=desc is None) as bar:
        try:
            for start in range(0, len(items) + CHUNK, CHUNK):
                if start < len(items):
                    running.append(_Chunk(index, kind, prepare(items[start:start + CHUNK]), k, threads))
                if len(running) == 2 or (start >= len(items) and running):
                    done = running.pop(0)
                    tops += done.result()
                    bar.update(done.size)
        except BaseException:  # a Ctrl-C or an error: the chunks in flight are dropped
            for chunk in running:
                chunk.pending.cancel()
            raise
    return tops
