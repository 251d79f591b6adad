"""Reading a cluster's answers: ``shaped`` (an answer not shaped as OpenSearch's is one line, never
a raw ``KeyError``), ``checked`` (every shard answered, or an error naming the one that did not),
``error_kind`` (an ``_msearch`` answer's error type), ``responses`` (an ``_msearch``'s answers, one
for each search sent, or an error: never fewer hits lists than queries) and ``boost`` (of a score's
explanation)."""

from __future__ import annotations

from bm25aug.errors import Unavailable, UserError


def shaped(where: str, what: str, read):
    """``read()``; an answer not shaped as OpenSearch's (a ``KeyError``, ``TypeError``... while
    reading it) is one line naming ``what`` was asked."""
    try:
        return read()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise UserError(f"{where}: the cluster's answer to {what} is not shaped as OpenSearch 2.x or 3.x "
                        f"answers ({type(e).__name__}: {str(e)[:80]}); fix: point the URL at an OpenSearch cluster's "
                        f"nodes and name an index, not an alias") from None


def error_kind(response) -> str:
    """OpenSearch's error type in one answer of an ``_msearch`` ('' when none)."""
    error = response.get("error") if isinstance(response, dict) else None
    return str(error.get("type", "")) if isinstance(error, dict) else str(error or "")


def responses(answer: dict, count: int, where: str) -> list[dict]:
    """The ``count`` answers of an ``_msearch``, in the order of its searches; any other shape (fewer
    answers, say) is one line, never a query left without hits in silence."""
    found = answer.get("responses") if isinstance(answer, dict) else None
    if not isinstance(found, list) or len(found) != count or not all(isinstance(r, dict) for r in found):
        got = len(found) if isinstance(found, list) else "no"
        raise UserError(f"{where}: the cluster answered an _msearch of {count} searches with {got} answers; fix: "
                        f"point the URL at an OpenSearch 2.x or 3.x cluster's nodes")
    return found


def checked(answer: dict, where: str) -> dict:
    """``answer`` when every shard answered in time; else an error naming what failed (the
    cluster's fault: ``Unavailable``)."""
    shards = answer.get("_shards", {})
    if shards.get("failed") or shards.get("successful", 0) + shards.get("skipped", 0) < shards.get("total", 0):
        failure = (shards.get("failures") or [{}])[0]
        node, reason = failure.get("node", "?"), (failure.get("reason") or {}).get("reason", "unknown")
        raise Unavailable(f"{where}: {shards.get('failed', 0)} of {shards.get('total')} shards failed (shard "
                          f"{failure.get('shard')} on node {node}: {reason}), so the hits would be partial; fix: check "
                          f"the cluster's health (`bm25aug cluster status`) and search again")
    if answer.get("timed_out"):
        raise Unavailable(f"{where}: the search timed out on some shard, so its hits would be partial; fix: search "
                          f"again")
    return answer


def boost(explanation: dict) -> float | None:
    """The ``boost`` factor of a BM25 explanation tree (depth first)."""
    if explanation.get("description") == "boost":
        return float(explanation["value"])
    for detail in explanation.get("details", []):
        if (found := boost(detail)) is not None:
            return found
    return None
