"""Export augmented queries as weighted term lists any Lucene/Pyserini user can search.

One JSON line per query: ``{"id": qid, "text": query, "vector": {token: weight}}`` with
``weight = w·(bow + a)`` (the ``vector`` field as in Pyserini's JSON vector collections). Each
``(token, weight)`` becomes ``BoostQuery(TermQuery(contents:token), weight)``.
"""

from __future__ import annotations

from pathlib import Path

from bm25aug.progress import progress as progress_bar

from bm25aug.io import check_outputs, write_jsonl
from bm25aug.limits import check


def prune(terms: dict[str, float], top_k: int | None = None, threshold: float = 0.0) -> dict[str, float]:
    """Drop weights <= threshold, then keep the ``top_k`` heaviest (ties broken by token)."""
    kept = sorted(((t, w) for t, w in terms.items() if w > threshold), key=lambda tw: (-tw[1], tw[0]))
    return dict(kept[:top_k] if top_k else kept)


def encode_queries(model, queries: list[str], top_k: int | None = None, threshold: float = 0.0,
                   progress: bool = True) -> list[dict[str, float]]:
    """One query at a time, so a query's terms never depend on its batch neighbours (padding
    and, in the int8 model, per-batch activation scales would change them)."""
    check("top_k", top_k)
    check("threshold", threshold)
    return [prune(model.encode([q])[0], top_k, threshold)
            for q in progress_bar(queries, desc="augment queries", unit="q", disable=not progress)]


def export_term_lists(model, queries: dict[str, str], path: str | Path, top_k: int | None = None,
                      threshold: float = 0.0) -> int:
    """Write one weighted term list per query (atomically); returns the number written. The file
    may not be, or lie inside, the folder the model was loaded from."""
    check_outputs({"the term-list file": path}, {"the model": getattr(model, "path", None)})
    qids = list(queries)
    vectors = encode_queries(model, [queries[q] for q in qids], top_k=top_k, threshold=threshold)
    write_jsonl(path, ({"id": q, "text": queries[q], "vector": v} for q, v in zip(qids, vectors)))
    return len(qids)
