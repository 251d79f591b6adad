"""Anserini's ranking of BM25 hits: ties ordered by external id, scores rounded and nudged.

Below every backend: a Lucene folder (``bm25aug.lucene``) and an OpenSearch cluster
(``bm25aug.opensearch``) both rank their hits by these rules, which is what makes them equal.

Anserini searches with ties broken by the external id, rounds each score to 4 decimals and then
lowers the k-th of a run of equal rounded scores by k·1e-6 so that every evaluation tool keeps its
order (``ScoreTiesAdjusterReranker``). Here the same, in numpy, in float32 as Java does, for a
whole batch of queries at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAIRS = np.dtype([("doc", ">i4"), ("score", ">f4")])  # Lucene's hits as the search handle packs them
_TOL, _EPS = np.float32(1e-4), np.float32(1e-6)  # Anserini's tie gap and per-tie nudge
# Extra hits fetched so that a tie across the k-th place is resolved by external id, mostly without a second
# search (research/thread_cpu.py counts the SciFact queries that need one: 23 of 300 with 16, none with 64).
TIE_MARGIN = 64
_ROUNDS = 16  # rounds of anserini_scores' fixed point before a query is walked hit by hit


@dataclass(frozen=True)
class TopK:
    """Hits of one query: Lucene doc numbers and Anserini's float32 scores, best first."""

    lucene_ids: np.ndarray
    scores: np.ndarray


EMPTY = TopK(np.zeros(0, np.int32), np.zeros(0, np.float32))


def anserini_top(results: list[np.ndarray], k: int, id_rank: np.ndarray) -> list[TopK]:
    """Each query's top k exactly as Anserini returns them, from Lucene's hits (contiguous
    ``PAIRS`` arrays, as ``np.frombuffer`` makes them, best first, one per query), all queries at
    once in numpy: equal scores ordered by external id (``id_rank``), the first k kept, scores as
    ``anserini_scores``."""
    lengths = np.fromiter(map(len, results), np.int64, len(results))
    if not lengths.sum():
        return [EMPTY] * len(results)
    pairs = np.frombuffer(b"".join(results), PAIRS)  # np.concatenate promotes a structured dtype per array
    docs, raw = pairs["doc"].astype(np.int64), pairs["score"].astype(np.float32)
    query = np.repeat(np.arange(len(results)), lengths)
    # Lucene sorted each query by score already: only runs of equal scores need another look, so
    # only their hits are sorted, by (run, external id); runs never span two queries.
    run = np.ones(len(raw), bool)
    run[1:] = (raw[1:] != raw[:-1]) | (query[1:] != query[:-1])
    in_run = ~run
    in_run[:-1] |= ~run[1:]
    at = np.flatnonzero(in_run)
    order = np.arange(len(raw))
    order[at] = at[np.argsort(np.cumsum(run[at]) * np.int64(len(id_rank)) + id_rank[docs[at]], kind="stable")]
    ends = np.cumsum(lengths)
    keep = order[np.arange(len(raw)) - (ends - lengths)[query] < k]
    kept = np.minimum(lengths, k)
    bounds = np.cumsum(kept)[:-1]
    first = np.zeros(len(keep), bool)
    first[0] = True
    first[bounds[bounds < len(keep)]] = True
    scores = anserini_scores(raw[keep], first)
    return [TopK(d, s) for d, s in zip(np.split(docs[keep], bounds), np.split(scores, bounds))]


def anserini_scores(raw: np.ndarray, first: np.ndarray | None = None) -> np.ndarray:
    """Round to 4 decimals (``Math.round`` in double), then lower the i-th score of a run of ties
    by i·1e-6, all in float32 as ``ScoreTiesAdjusterReranker`` does: hit by hit, a hit ties when
    the previous score, as already lowered, is at most 1e-4 above it. ``first`` marks where each
    query's hits start when ``raw`` holds several queries' (a run never crosses them).

    Vectorized: start from the hits that tie before any lowering and grow the set until it holds
    (lowering only lengthens runs, and a set that satisfies the rule at every hit is the one the
    hit-by-hit loop reaches, since that rule looks only backwards). Only a tied hit is lowered,
    so only the hit after a run of ties can start to tie; after the first round only the runs
    that grew are lowered again. A round can lengthen a chain of ties by one hit, so a query
    still growing after ``_ROUNDS`` is walked hit by hit."""
    scores = (np.floor(raw.astype(np.float64) * 10000.0 + 0.5) / 10000.0).astype(np.float32)
    starts = np.zeros(scores.size, bool) if first is None else first.copy()
    starts[:1] = True
    ties = np.zeros(scores.size, bool)
    ties[1:] = scores[:-1] - scores[1:] <= _TOL
    ties &= ~starts
    lowered, runs = scores.copy(), _all_runs(ties)
    for _ in range(_ROUNDS):
        heads, ends = runs
        lengths = ends - heads - 1
        places = _places(lengths)
        at = np.repeat(heads, lengths) + places
        lowered[at] = scores[at] - _EPS * places.astype(np.float32)
        after = ends[ends < scores.size]  # the hit after each run
        grown = after[~starts[after] & (lowered[after - 1] - scores[after] <= _TOL)]
        if not grown.size:
            return lowered
        ties[grown] = True
        runs = _runs(ties, grown)
    # Queries are independent (runs never cross them): one that settled keeps the last round's
    # scores; one still growing is walked hit by hit.
    bounds = np.append(np.flatnonzero(starts), scores.size)
    for q in np.unique(np.searchsorted(bounds, grown, side="right") - 1).tolist():
        lowered[bounds[q]:bounds[q + 1]] = _ties_hit_by_hit(scores[bounds[q]:bounds[q + 1]])
    return lowered


def _all_runs(ties: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every run of ties: the position of the hit it follows (its head, not lowered) and the
    position just past it."""
    heads = np.flatnonzero(~ties[:-1] & ties[1:])
    ends = np.flatnonzero(ties[:-1] & ~ties[1:]) + 1
    return heads, np.append(ends, ties.size) if ties.size and ties[-1] else ends


def _runs(ties: np.ndarray, tied: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs of ties that hold the tied hits ``tied`` (sorted positions), once each, as
    ``_all_runs`` gives them."""
    untied = np.flatnonzero(~ties)
    after = np.searchsorted(untied, tied)
    heads = untied[after - 1]  # hit 0 never ties, so every tied hit has a head
    heads = heads[np.append(True, heads[1:] != heads[:-1])]
    next_untied = np.searchsorted(untied, heads, side="right")
    ends = np.append(untied, ties.size)[next_untied]
    return heads, ends


def _places(lengths: np.ndarray) -> np.ndarray:
    """1, 2, ... n for each run of n tied hits, concatenated: a tied hit's place in its run."""
    return np.arange(1, lengths.sum() + 1) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def _ties_hit_by_hit(scores: np.ndarray) -> np.ndarray:
    """``ScoreTiesAdjusterReranker`` on one query's rounded scores, hit by hit (long chains only)."""
    scores, dup = scores.copy(), 0
    for i in range(1, scores.size):
        dup = dup + 1 if scores[i - 1] - scores[i] <= _TOL else 0
        scores[i] = scores[i] - _EPS * np.float32(dup)
    return scores
