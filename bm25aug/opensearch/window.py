"""How deep a search of a cluster's index goes, within its result window (``index.max_result_window``,
the most hits one search may return).

* ``depth``: k and ``TIE_MARGIN`` more hits, within the index's size and its window, as Lucene in
  our process asks for k and ``TIE_MARGIN`` more within the index's size. A k whose hits would
  run past the window (``min(k, num_docs) > window``, a k at or past the index's size included)
  is refused in one line with the setting that allows it: never served cut to the window.
* ``complete``/``deeper``: a tie across the k-th place is searched again four times as deep,
  until it is seen whole or the depth is the window.
* ``tie_past_window``/``after_tie``: a tie that still crosses the k-th place at the window's
  depth may run past it; the rest of it is asked sorted by (score, external id) after
  (the tied score, ""), so the k hits are Anserini's (ties by external id) whatever the window.
"""

from __future__ import annotations

import numpy as np

from bm25aug.errors import UserError
from bm25aug.limits import check
from bm25aug.ranking import TIE_MARGIN
from bm25aug.opensearch.schema import ID_FIELD


def depth(k: int, num_docs: int, window: int, where: str, index: str) -> int:
    """Hits to ask for first; a k the window cannot hold is an error naming the fix."""
    wanted = min(check("k", k), num_docs)
    if wanted > window:
        size = f", and the index holds {num_docs:,} documents" if k >= num_docs else ""
        raise UserError(f"k={k} is past {where}'s result window ({window:,} hits, index.max_result_window){size}; "
                        f"fix: ask for at most {window:,} hits, or raise that index setting to {wanted:,} (PUT "
                        f"/{index}/_settings with {{\"index\": {{\"max_result_window\": {wanted}}}}})")
    return int(min(k + TIE_MARGIN, num_docs, window))


def complete(scores: np.ndarray, n: int, k: int, num_docs: int, window: int) -> bool:
    """Whether the top n (``scores``, best first) decide the top k: fewer hits than asked for,
    the k-th score above the last one, or as deep as the index or the window goes."""
    return len(scores) < n or len(scores) <= k or scores[k - 1] > scores[-1] or n >= min(num_docs, window)


def deeper(n: int, num_docs: int, window: int) -> int:
    return min(n * 4, num_docs, window)


def tie_past_window(scores: np.ndarray, n: int, k: int, num_docs: int, window: int) -> bool:
    """Whether the search stopped at the window with the k-th score equal to the last one seen."""
    return n == window < num_docs and k <= len(scores) == n and scores[k - 1] == scores[-1]


def after_tie(body: dict, scores: np.ndarray, raw: list[float], k: int) -> tuple[dict, np.ndarray]:
    """The search (``body``, a term query of n hits) for the first hits of the tie at the k-th place
    in external-id order, and which of ``scores`` are above the tie (kept as they are)."""
    above = scores > scores[k - 1]
    return {**body, "size": k - int(above.sum()), "sort": [{"_score": "desc"}, {ID_FIELD: "asc"}],
            "search_after": [raw[k - 1], ""], "track_scores": True}, above
