"""A weighted query given from outside, ``{term: weight}`` (a server's client, ``bm25aug search
--terms``), checked before it is searched.

The terms are the index's own terms, searched as they are (``BM25Searcher.search_terms``): the
English analyzer's stems on a flat index (``durabl``, not ``durability``), WordPiece tokens on a
wp one, exactly what ``/augment`` returns and ``bm25aug export`` writes. Nothing is analyzed, so
a term that no document holds (``Durability`` on a flat index, whose terms are lower case) is no
error: it matches nothing, as in Lucene. What no index term can be is refused: a term with
whitespace or a control character (both analyzers split on those), one that is not valid
Unicode, or one longer than Lucene's longest term. So is a list Lucene would refuse or misread: empty,
more terms than ``max_terms`` (Lucene's clause limit), or a weight that is not a number from 0 to
``MAX_TERM_WEIGHT`` (a larger boost overflows Lucene's 32-bit scores; a negative one is no boost).
"""

from __future__ import annotations

import math
import unicodedata

from bm25aug.errors import UserError
from bm25aug.limits import MAX_TERM_WEIGHT

MAX_TERM_BYTES = 32_766  # Lucene's IndexWriter.MAX_TERM_LENGTH: no index holds a longer term
FIX = ("fix: send the index's own terms as {term: weight}, e.g. {\"durabl\": 1.5} on a flat index "
       "(GET /v1/{index}/augment shows a query's)")


def _unfit(term: str) -> str | None:
    """Why ``term`` cannot be an index term, or None."""
    if not term:
        return "is empty"
    try:
        size = len(term.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode (it holds a lone surrogate)"
    if size > MAX_TERM_BYTES:
        return f"has {size:,} bytes, over Lucene's longest term ({MAX_TERM_BYTES:,})"
    if any(c.isspace() or unicodedata.category(c) == "Cc" for c in term):
        return "holds whitespace or a control character, which no index term holds (the analyzers split on them)"
    return None


def check_term_list(terms, max_terms: int) -> dict[str, float]:
    """``terms`` as ``{term: float weight}`` if it can be searched, else a ``UserError`` (the server's 400)."""
    if not isinstance(terms, dict) or not terms:
        raise UserError(f"terms must be a non-empty object of term weights; {FIX}")
    if len(terms) > max_terms:
        raise UserError(f"the term list has {len(terms):,} terms, over the limit of {max_terms:,} "
                        f"(Lucene's clause limit); fix: send the {max_terms:,} heaviest")
    checked = {}
    for term, weight in terms.items():
        if not isinstance(term, str):
            raise UserError(f"term {term!r} is not a string; {FIX}")
        if why := _unfit(term):
            raise UserError(f"term {term[:80]!r} {why}; {FIX}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                or not 0 <= weight <= MAX_TERM_WEIGHT:
            raise UserError(f"the weight of {term!r} is {weight!r}; fix: pass a number from 0 to {MAX_TERM_WEIGHT:g} "
                            f"(a larger boost overflows Lucene's 32-bit scores; 0 drops the term)")
        checked[term] = float(weight)
    if not any(w > 0 for w in checked.values()):
        raise UserError("no term has a weight above 0, so nothing would be searched; fix: give at least one "
                        "term a positive weight")
    return checked


def read_term_lists(path) -> dict[str, dict[str, float]]:
    """Weighted term lists by query id from a JSONL file as ``bm25aug export`` writes it (and
    Pyserini's JSON vector topics): one object a line with ``id`` and ``vector`` (``{term: weight}``)."""
    import json
    from pathlib import Path

    from bm25aug.io import read_lines
    from bm25aug.limits import MAX_CLAUSES, run_id_ok

    path, lists = Path(path), {}
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{where}: malformed JSON ({e.msg}); fix: repair that line (bm25aug export writes one "
                            f"{{\"id\": ..., \"vector\": {{term: weight}}}} object a line)") from None
        if not isinstance(row, dict) or not isinstance(row.get("vector"), dict) \
                or not isinstance(row.get("id"), (str, int)) or isinstance(row.get("id"), bool):
            raise UserError(f"{where}: expected {{\"id\": ..., \"vector\": {{term: weight}}}}; fix: repair that line "
                            f"(as bm25aug export writes it)")
        qid = str(row["id"])
        if not run_id_ok(qid):
            raise UserError(f"{where}: query id {qid!r} is empty or holds whitespace or a control character, which a TREC "
                            f"run cannot hold; fix: give that query an id without spaces, tabs, newlines or control characters")
        if qid in lists:
            raise UserError(f"{where}: query id {qid!r} is given twice; fix: give each term list its own id")
        if not row["vector"]:  # a query with no terms (all stopwords, or all pruned): no hits, as from the model
            lists[qid] = {}
            continue
        try:
            lists[qid] = check_term_list(row["vector"], MAX_CLAUSES)
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
    if not any(lists.values()):
        raise UserError(f"{path} holds no term to search (no line, or only empty vectors); fix: pass the JSONL that "
                        f"bm25aug export writes")
    return lists
