"""The one retry policy of every request bm25aug sends a cluster again: which answers, how many
times, how long between (search, document counts and bulk ingest alike).

* **Which.** An answer that says the cluster cannot serve *now*: 429 (its queues are full) or a 5xx
  (e.g. a shard whose node died between a search's two phases, or a primary not yet promoted),
  for the whole request or, in a bulk, for one document. Anything else (a 4xx: the request is
  refused as it stands) is raised at once. A request that no node answered is not sent again
  here: the transport has already asked every node of the URL (``transport``: opensearch-py's
  own failover, ``max_retries`` one less than the nodes, ``retry_on_timeout``).
* **How many, how long.** ``RETRIES`` more tries, ``BACKOFF_S`` after the first failure and
  twice as long after each next one, at most ``BACKOFF_MAX_S`` (0.5 + 1 + 2 + 4 + 8 = 15.5 s in
  all); then the last error, an ``Unavailable``.
* **Why not opensearch-py's.** Its ``retry_on_status`` sends again at once, with no wait, and
  marks the node that answered dead, so a cluster that loses a node would spend every try in
  milliseconds and push healthy nodes to the back; its bulk helper retries 429 only. Sending a
  request again is safe for every request that uses this policy: searches and counts read, and the
  ingest writes ``create`` operations, a document already there being a 409 that counts as written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from bm25aug.opensearch.client import ClusterError

RETRIES = 5  # tries after the first
BACKOFF_S = 0.5  # the wait before the first retry, doubled before each next one
BACKOFF_MAX_S = 8.0
T = TypeVar("T")


def retryable(status: int) -> bool:
    """Whether an answer of HTTP ``status`` (of a request, or of one bulk operation) is sent again."""
    return status == 429 or status >= 500


def attempts() -> Iterator[int]:
    """0, 1, ... ``RETRIES``: each try's number, after waiting the backoff before every retry."""
    for attempt in range(RETRIES + 1):
        if attempt:
            time.sleep(min(BACKOFF_S * 2 ** (attempt - 1), BACKOFF_MAX_S))
        yield attempt


def retrying(call: Callable[[], T]) -> T:
    """``call()``, sent again while the cluster answers ``retryable``ly (a ``ClusterError``'s
    ``status``), up to ``RETRIES`` times; then its error."""
    for attempt in attempts():
        try:
            return call()
        except ClusterError as e:
            if not retryable(e.status) or attempt == RETRIES:
                raise
    raise AssertionError("unreachable")
