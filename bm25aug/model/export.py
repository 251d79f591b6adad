"""Export augmented queries as weighted term lists any Lucene/Pyserini user can search.

One JSON line per query: ``{"id": qid, "text": query, "vector": {token: weight}}`` with
``weight = w·(bow + a)`` (the ``vector`` field as in Pyserini's JSON vector collections). Each
``(token, weight)`` becomes ``BoostQuery(TermQuery(contents:token), weight)``.

The command, ``bm25aug export``, is ``bm25aug.eval.export_command``.
"""

from __future__ import annotations

from pathlib import Path

from bm25aug.io import write_jsonl
from bm25aug.outputs import check_outputs
from bm25aug.model.encoder import QueryEncoder, encode_queries


def export_term_lists(model: QueryEncoder, queries: dict[str, str], path: str | Path, top_k: int | None = None,
                      threshold: float = 0.0, batch_size: int | None = None, threads: int = 1) -> int:
    """Write one weighted term list per query (atomically), encoded on ``threads`` threads (the
    same lists on any number); returns the number written. The file may not be, or lie inside,
    the folder the model was loaded from."""
    check_outputs({"the term-list file": path}, {"the model": model.path})
    qids = list(queries)
    vectors = encode_queries(model, [queries[q] for q in qids], top_k=top_k, threshold=threshold,
                             batch_size=batch_size, threads=threads)
    write_jsonl(path, ({"id": q, "text": queries[q], "vector": v} for q, v in zip(qids, vectors)))
    return len(qids)
