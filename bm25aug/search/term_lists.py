"""A weighted term list ``{term: weight}``: the one rule for what can be searched, on every path.

The library (``BM25Searcher.search_terms``, the batch paths, ``AugmentedSearcher``), the server's
REST and MCP, and ``bm25aug search --terms`` all check a list here, and Lucene then searches
exactly what passed: one clause per term with a positive weight, the term as given and the weight
as a float32 boost (``bm25aug.lucene.term_query``; nothing is parsed, so no character or length is
read as anything but the term).

The terms are the index's own terms, searched as they are: the English analyzer's stems on a flat
index (``durabl``, not ``durability``), WordPiece tokens on a wp one, exactly what ``/augment``
returns and ``bm25aug export`` writes. Nothing is analyzed, so a term that no document holds
(``Durability`` on a flat index, whose terms are lower case) is no error: it matches nothing, as in
Lucene. What no index term can be is refused: empty, not a string, with whitespace or a control
character (both analyzers split on those), not valid Unicode, or longer than Lucene's longest term.

A weight (``weight_unfit``) is a real number: 0 drops the term, and a positive one runs from
``MIN_TERM_WEIGHT`` (float32's smallest normal number; below it the boost Lucene holds is not the
weight given, and under about 7e-46 it is 0) to ``MAX_TERM_WEIGHT`` (a larger boost overflows
Lucene's 32-bit scores). A list left with no term (empty, or every weight 0) searches nothing and
has no hits, as a query of stopwords has none; the server refuses such a request instead, since it
asks for nothing (``bm25aug.serve.service``). A list longer than the clause limit is refused before
Lucene sees it (``bm25aug.lucene.term_query.check_clauses``).
"""

from __future__ import annotations

import math
import numbers
import re

from bm25aug.errors import UserError
from bm25aug.limits import MAX_TERM_WEIGHT, MIN_TERM_WEIGHT

MAX_TERM_BYTES = 32_766  # Lucene's IndexWriter.MAX_TERM_LENGTH: no index holds a longer term
_SAFE_CHARS = MAX_TERM_BYTES // 4  # a term of at most this many characters has at most MAX_TERM_BYTES UTF-8 bytes
_SPLIT = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")  # whitespace and control characters (Unicode's Cc)
FIX = ("fix: send the index's own terms as {term: weight}, e.g. {\"durabl\": 1.5} on a flat index "
       "(AugmentedSearcher.augment, or GET /v1/{index}/augment, shows a query's)")
WEIGHT_FIX = (f"fix: pass 0 to drop the term, or a number from {MIN_TERM_WEIGHT:.8g} to {MAX_TERM_WEIGHT:g} (Lucene's "
              f"boosts are 32-bit floats: a smaller positive weight cannot be held, a larger one overflows the scores)")


def term_unfit(term) -> str | None:
    """Why ``term`` cannot be an index term, or None."""
    if not isinstance(term, str):
        return f"is a {type(term).__name__}, not a string"
    if not term:
        return "is empty"
    try:
        size = len(term.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode (it holds a lone surrogate)"
    if size > MAX_TERM_BYTES:
        return f"has {size:,} bytes, over Lucene's longest term ({MAX_TERM_BYTES:,})"
    if _SPLIT.search(term):
        return "holds whitespace or a control character, which no index term holds (the analyzers split on them)"
    return None


def weight_unfit(weight) -> str | None:
    """Why ``weight`` cannot be a term's weight, or None: the one rule (module docstring)."""
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        return "not a number"
    try:
        float(weight)
    except OverflowError:  # an integer too large for a float (Python's ints have no bound)
        return "negative (a negative boost is no boost)" if weight < 0 else \
            f"over {MAX_TERM_WEIGHT:g}, which would overflow Lucene's 32-bit scores"
    if not math.isfinite(weight):
        return "not finite"
    if weight < 0:
        return "negative (a negative boost is no boost)"
    if 0 < weight < MIN_TERM_WEIGHT:
        return f"below {MIN_TERM_WEIGHT:.8g}, the smallest boost Lucene's 32-bit floats hold as given"
    if weight > MAX_TERM_WEIGHT:
        return f"over {MAX_TERM_WEIGHT:g}, which would overflow Lucene's 32-bit scores"
    return None


def check_terms(terms: dict[str, float]) -> dict[str, float]:
    """``terms`` if every term and weight can be searched (``term_unfit``, ``weight_unfit``), else
    a ``UserError`` naming the first that cannot. The common case is decided with a few passes in
    C over the whole list; only a list that fails them is looked at term by term."""
    if not isinstance(terms, dict):
        raise UserError(f"a term list is a {type(terms).__name__}, not a dict; {FIX}")
    if not terms or _plainly_fit(terms):
        return terms
    for term, weight in terms.items():
        if why := term_unfit(term):
            raise UserError(f"term {str(term)[:80]!r} {why}; {FIX}")
        if why := weight_unfit(weight):
            raise UserError(f"the weight of {term[:80]!r} is {_shown(weight)}, {why}; {WEIGHT_FIX}")
    return terms


def _shown(weight) -> str:
    """A weight as a message shows it: a huge integer's digits cut short."""
    text = repr(weight)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def _plainly_fit(terms: dict) -> bool:
    """Whether every term and weight of a non-empty ``terms`` passes, checked in bulk."""
    try:
        joined = "".join(terms)
        joined.encode("utf-8")
        weights = terms.values()
        low = min(weights)
        return ("" not in terms and _SPLIT.search(joined) is None and max(map(len, terms)) <= _SAFE_CHARS
                and math.isfinite(sum(weights)) and max(weights) <= MAX_TERM_WEIGHT
                and (low >= MIN_TERM_WEIGHT or (low == 0 and all(w == 0 or w >= MIN_TERM_WEIGHT for w in weights)))
                and not any(type(w) is bool for w in weights))
    except (TypeError, UnicodeEncodeError, OverflowError):
        return False


def check_term_list(terms, max_terms: int) -> dict[str, float]:
    """A term list from outside (a server's client, a ``--terms`` file) as ``{term: float weight}``,
    at most ``max_terms`` long, else a ``UserError`` (the server's 400)."""
    if not isinstance(terms, dict):
        raise UserError(f"terms must be an object of term weights; {FIX}")
    if len(terms) > max_terms:
        raise UserError(f"the term list has {len(terms):,} terms, over the limit of {max_terms:,} "
                        f"(Lucene's clause limit); fix: send the {max_terms:,} heaviest")
    return {term: float(weight) for term, weight in check_terms(terms).items()}


def read_term_lists(path) -> dict[str, dict[str, float]]:
    """Weighted term lists by query id from a JSONL file as ``bm25aug export`` writes it (and
    Pyserini's JSON vector topics): one object a line with ``id`` and ``vector`` (``{term: weight}``)."""
    import json
    from pathlib import Path

    from bm25aug.io import read_lines
    from bm25aug.limits import ID_RULE, MAX_CLAUSES, run_id_ok

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
            raise UserError(f"{where}: query id {qid!r} {ID_RULE}")
        if qid in lists:
            raise UserError(f"{where}: query id {qid!r} is given twice; fix: give each term list its own id")
        try:
            lists[qid] = check_term_list(row["vector"], MAX_CLAUSES)
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
    if not any(w > 0 for terms in lists.values() for w in terms.values()):
        raise UserError(f"{path} holds no term to search (no line, or only empty vectors or weights of 0); fix: pass the JSONL that "
                        f"bm25aug export writes")
    return lists
