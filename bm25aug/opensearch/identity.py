"""Which index an ``OpenSearchIndex`` searches, and that it stays the one it opened.

* ``identify``: what opening reads in one request (``GET /INDEX``): the mapping with its bm25aug
  record (``schema.record_of``), the index's UUID (``index.uuid``: new whenever an index of that
  name is made, so a deleted and re-made index never has the old one's) and its result window. An
  alias is refused, naming its indexes (``not_an_index``, which ``bm25aug index --to`` says too).
* ``Watch``: answers are used only from the index that was opened. After an answer arrives, the
  index is checked again (its UUID and record, one small request) unless a check that found it
  unchanged started less than ``RECHECK_S`` before; a search answered with no hits is checked at
  once (a check that started after the answer arrived covers it), and a request the cluster
  fails with ``index_not_found_exception`` means the index was deleted. An index deleted, made
  again (a new UUID, whatever it holds, an unfinished ingest included) or whose record changed is
  ``IndexChanged`` for that call and every later one, until the index is opened again. So the
  one answer from another index that can be used is a search with hits that arrived less than
  ``RECHECK_S`` after the opened index was deleted, from an index made and filled again within
  that time (an ingest makes nothing searchable before its end); none is used once a check has
  seen the change.
* ``engine_scale`` (``term_scale``: for a term of any field) and ``clause_limit``: what the engine
  multiplies Lucene's BM25 by, and the cluster's clause limit, read once at opening.
* Both read the answering node's own copy of the cluster's state (``local``), as a search does:
  no round trip to the cluster manager, so searches go on while the cluster has none.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from bm25aug.errors import Unavailable, UserError
from bm25aug.opensearch.answers import boost, shaped
from bm25aug.opensearch.client import Client
from bm25aug.opensearch.schema import DEFAULT_CLAUSE_LIMIT, FIELD, record_of, score_scale

_BM25_SCORE = "computed as boost * idf * tf"  # Lucene's BM25 explanation of a term's score
RECHECK_S = 1.0  # an answer is used unchecked only this soon after a check found the index unchanged
MAX_WINDOW = 10_000  # OpenSearch's default index.max_result_window, when the index does not say
_OPEN_KEEP = ("*.mappings,*.settings.index.uuid,*.settings.index.max_result_window,"
              "*.defaults.index.max_result_window")
_CHECK_KEEP = "*.settings.index.uuid,*.mappings._meta"


class IndexChanged(Unavailable):
    """The index a searcher opened was deleted, made again, or had its record changed since: its
    answers would be another index's. Every later call raises it too, until the index is opened again."""


def identify(client: Client, name: str, where: str) -> tuple[dict, str, dict, int]:
    """The index's mapping, UUID, bm25aug record (checked; empty: not bm25aug's) and result window."""
    answer = client.request("GET", f"/{name}", params={"include_defaults": "true", "local": "true",
                                                      "filter_path": _OPEN_KEEP}, ok=(404,))
    if _missing(answer):
        raise UserError(f"{where}: the cluster has no index {name}; fix: make it with `bm25aug index --dataset NAME "
                        f"--to {str(where).split('?', 1)[0]}`, or name an index the cluster holds")
    if isinstance(answer, dict) and answer and name not in answer and all(isinstance(v, dict) for v in answer.values()):
        alias = not_an_index(name, list(answer), "bm25aug searches an index itself: its mapping, statistics and ids")
        raise UserError(f"{where}: {alias}")
    record = record_of(answer, name, where)

    def read():
        entry = answer[name]
        window = entry.get("settings", {}).get("index", {}).get("max_result_window") or \
            entry.get("defaults", {}).get("index", {}).get("max_result_window", MAX_WINDOW)
        uuid = entry["settings"]["index"]["uuid"]
        if not isinstance(uuid, str) or not uuid or int(window) < 1:
            raise ValueError(f"index.uuid {uuid!r}, index.max_result_window {window!r}")
        return entry.get("mappings") or {}, uuid, int(window)

    mapping, uuid, window = shaped(where, f"GET /{name}", read)
    return mapping, uuid, record, window


def not_an_index(name: str, indexes: list[str], why: str) -> UserError:
    """The error for ``name``, an alias of ``indexes`` on the cluster (its answers name them instead)."""
    names = ", ".join(sorted(indexes))
    return UserError(f"{name} on the cluster is an alias of {names[:200]}, not an index; fix: name an index in the URL "
                     f"({why})")


def engine_scale(client: Client, name: str, k1: float) -> np.float32:
    """What the engine's BM25 multiplies Lucene's by, read off its explanation of one term's score
    (the boost it scores with, for a boost of 1): OpenSearch 2.x's LegacyBM25Similarity gives
    (1 + k1), a plain BM25Similarity (OpenSearch 3.x) 1, which Lucene leaves out of the explanation.
    ``version_scale`` when nothing is indexed to read it off."""
    hit = client.request("POST", f"/{name}/_search", {"size": 1, "_source": [FIELD]})["hits"]["hits"]
    if not hit:
        return version_scale(client, k1)
    from bm25aug.lucene.analysis import analyze

    terms = analyze(hit[0]["_source"].get(FIELD, ""))
    return term_scale(client, name, FIELD, terms[0], k1) if terms else version_scale(client, k1)


def version_scale(client: Client, k1: float) -> np.float32:
    """The factor the engine's version scores with by default: 1 on OpenSearch 3.x and later
    (``BM25Similarity``), (1 + k1) before (``LegacyBM25Similarity``, ``schema.score_scale``)."""
    number = str(client.request("GET", "/").get("version", {}).get("number", "0"))
    major = number.split(".", 1)[0]
    return np.float32(1) if major.isdigit() and int(major) >= 3 else score_scale(k1)


def term_scale(client: Client, name: str, field: str, term: str, k1: float) -> np.float32:
    """``engine_scale`` read off the explanation of ``term``'s score in ``field``."""
    body = {"size": 1, "explain": True, "query": {"term": {field: term}}}
    explained = client.request("POST", f"/{name}/_search", body)["hits"]["hits"]
    if not explained:
        return version_scale(client, k1)
    factor = boost(explained[0]["_explanation"])
    if factor is None and _bm25_scored(explained[0]["_explanation"]):
        return np.float32(1)  # a BM25 score whose boost is 1: Lucene lists a boost only when it is not
    return np.float32(factor) if factor else version_scale(client, k1)


def _bm25_scored(explanation: dict) -> bool:
    """Whether the explanation tree holds Lucene's BM25 score of a term."""
    return _BM25_SCORE in str(explanation.get("description", "")) or \
        any(_bm25_scored(detail) for detail in explanation.get("details", []))


def deleted_documents(client: Client, index: str, copies: str = "total") -> int:
    """Deleted (or updated) documents not merged away yet in ``index``'s shard ``copies`` ("total":
    every copy; "primaries"): Lucene still counts them in a term's document frequency."""
    answer = client.request("GET", f"/{index}/_stats/docs")
    return answer.get("_all", {}).get(copies, {}).get("docs", {}).get("deleted", 0)


def clause_limit(client: Client) -> int:
    """The smallest ``indices.query.bool.max_clause_count`` among the cluster's nodes."""
    key = "indices.query.bool.max_clause_count"
    nodes = client.request("GET", "/_nodes/settings", params={"flat_settings": "true"}).get("nodes", {})
    limits = [int(n.get("settings", {}).get(key, DEFAULT_CLAUSE_LIMIT)) for n in nodes.values()]
    cluster = client.request("GET", "/_cluster/settings", params={"flat_settings": "true", "local": "true"})
    limits += [int(cluster[scope][key]) for scope in ("persistent", "transient") if key in cluster.get(scope, {})]
    return min(limits or [DEFAULT_CLAUSE_LIMIT])


class Watch:
    """That ``name`` is still the index of ``uuid`` with ``record`` (see the module's docstring)."""

    def __init__(self, client: Client, name: str, where: str, uuid: str, record: dict):
        self.client, self.name, self.where, self.uuid, self.record = client, name, where, uuid, record
        self._ok_at = -float("inf")  # when the last check that found the index unchanged started
        self._changed: str | None = None
        self._lock = threading.Lock()

    def still(self) -> None:
        """``IndexChanged`` when a check has seen the index change (nothing is asked)."""
        if self._changed is not None:
            raise IndexChanged(self._changed)

    def after(self, answered_at: float, empty: bool = False) -> None:
        """Whether an answer that arrived at ``answered_at`` (``time.monotonic()``) may be used:
        ``IndexChanged`` if not. Checks the index when the last check is ``RECHECK_S`` old, or
        the answer is an ``empty`` search."""
        self.still()
        if not empty and answered_at - self._ok_at < RECHECK_S:
            return
        with self._lock:  # one check at a time; one that started after this answer covers it
            if self._ok_at < answered_at:
                self.check()
        self.still()

    def gone(self) -> None:
        """The cluster answered that the index does not exist: it was deleted since it was opened
        (an ``IndexChanged`` from now on; a check could still read it on a node that has not yet
        applied the deletion)."""
        self._change("it was deleted")

    def check(self) -> None:
        """Ask the cluster for the index's UUID and record now: ``IndexChanged`` if either changed."""
        self.still()
        started = time.monotonic()
        answer = self.client.request("GET", f"/{self.name}", params={"local": "true", "filter_path": _CHECK_KEEP},
                                     ok=(404,))
        why = self._difference(answer)
        if why:
            self._change(why)
        self._ok_at = max(self._ok_at, started)

    def _change(self, why: str) -> None:
        if self._changed is None:
            self._changed = (f"{self.where} is no longer the index this searcher opened ({why}), so its answers "
                             f"would be another index's; fix: open it again once it is complete (restart the "
                             f"server, or make a new searcher)")
        raise IndexChanged(self._changed)

    def _difference(self, answer: dict) -> str | None:
        if _missing(answer):
            return "it was deleted"
        try:
            uuid = answer[self.name]["settings"]["index"]["uuid"]
            record = record_of(answer, self.name, self.where)
        except (KeyError, TypeError, UserError):
            return "its settings or its bm25aug record can no longer be read"
        if uuid != self.uuid:
            return f"it was deleted and made again: index.uuid {self.uuid} is now {uuid}"
        if record != self.record:
            return (f"its bm25aug record changed: {record.get('dataset')}'s corpus, {record.get('state')}, where it "
                    f"was {self.record.get('dataset')}'s, {self.record.get('state')}")
        return None


def _missing(answer: dict) -> bool:
    """Whether ``answer`` is OpenSearch's 404 for an index that does not exist."""
    error = answer.get("error")
    return answer.get("status") == 404 and (not isinstance(error, dict) or
                                            error.get("type") == "index_not_found_exception")
