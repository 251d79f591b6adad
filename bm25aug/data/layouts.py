"""The three on-disk layouts' judged splits: queries, qrels and (QA) answers, read strictly.

A split keeps only judged queries; a query or document id given twice keeps its first text, with
a warning; DPR's question CSV is read as DPR writes it (quoted answer lists), and its retriever-
training JSON is streamed into a compact cache (``bm25aug.data.registry`` picks the layout).
"""

from __future__ import annotations

import ast
import csv
import json
import logging
import sys
import tokenize
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.data.corpus import beir_row
from bm25aug.io import CACHE_ROOT, atomic_open, derived_ok, read_lines, record_derived, source_key
from bm25aug.limits import check, check_text
from bm25aug.progress import progress

log = logging.getLogger(__name__)
csv.field_size_limit(sys.maxsize)


def first_file(path: Path, patterns: list[str]) -> Path | None:
    for pattern in patterns:
        hits = sorted(path.glob(pattern))
        if hits:
            return hits[0]
    return None


@dataclass
class Split:
    """Queries of one split with what judges them: graded qrels and/or answer strings."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    answers: dict[str, list[str]] = field(default_factory=dict)
    negatives: dict[str, list[str]] = field(default_factory=dict)  # DPR's hard_negative_ctxs ids
    # Judgements of documents the corpus lacks: out of ``qrels`` (training never sees them) but
    # scored, as trec_eval, Anserini and BEIR score them (``judged_qrels``).
    absent: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def judged_qrels(self) -> dict[str, dict[str, int]]:
        """Every judgement, absent documents included: what evaluation averages over, so a query
        whose judged documents are all missing stays in the average and scores 0."""
        if not self.absent:
            return self.qrels
        return {q: {**self.qrels.get(q, {}), **self.absent.get(q, {})} for q in {*self.qrels, *self.absent}}


def _read_queries_jsonl(path: Path) -> list[tuple[str, str]]:
    """(id, text) of every query of a BEIR ``queries.jsonl``."""
    return [beir_row(line, f"{path}:{lineno}", ("text",)) for lineno, line in read_lines(path) if line.strip()]


def keep_first(pairs, where: Path, what: str) -> dict:
    """A dict from (id, value) pairs; repeated ids keep their first value, with a warning and a count."""
    out, repeated = {}, 0
    for key, value in pairs:
        if key in out:
            repeated += 1
        else:
            out[key] = value
    if repeated:
        log.warning("%s: %d repeated %s ids; the first copy of each is kept", where, repeated, what)
    return out


def _read_qrels_tsv(path: Path, trec: bool = False) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    repeated = 0
    for lineno, line in read_lines(path):
        parts = line.split()
        if not parts or (lineno == 1 and not trec and parts[0] == "query-id"):
            continue
        if len(parts) == 4:  # TREC's 'query-id 0 doc-id grade', also where BEIR's three columns are usual
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3:
            raise UserError(f"{path}:{lineno}: expected 'query-id corpus-id score'; fix: repair that line")
        try:
            grade = int(parts[2])
        except ValueError:
            raise UserError(f"{path}:{lineno}: relevance grade {parts[2]!r} is not an integer; "
                            f"fix: use integer grades (0, 1, 2, ...)") from None
        judged = qrels.setdefault(parts[0], {})
        repeated += parts[1] in judged
        judged[parts[1]] = check("grade", grade, f"{path}:{lineno}: relevance grade")
    if repeated:
        log.warning("%s: %d lines judge a query-document pair already judged; the last grade is kept, as "
                    "pytrec_eval and BEIR's loader keep it", path, repeated)
    if not qrels:
        raise UserError(f"{path} holds no judgments; fix: add 'query-id corpus-id score' lines, or pick another split")
    return qrels


def _judged_queries(qrels: dict[str, dict[str, int]], queries: dict[str, str], where: Path) -> Split:
    """Keep the judged queries that have a text; judgments of unknown queries are dropped with a
    warning (scored as 0 they would silently lower every metric)."""
    missing = [q for q in qrels if q not in queries]
    if missing:
        log.warning("%s: %d judged queries are not in the queries file (e.g. %s); they are not evaluated",
                    where, len(missing), missing[0])
    texts = {q: check_text(queries[q], f"{where}: query {q}") for q in qrels if q in queries}
    if not texts:
        raise UserError(f"{where}: none of its {len(qrels)} judged queries is in the queries file; fix: check that "
                        f"the qrels and the queries belong together")
    if empty := [q for q, t in texts.items() if not t.strip()]:
        log.warning("%s: %d judged queries have no text (e.g. %s); they have no hits and score 0", where, len(empty),
                    empty[0])
    return Split(texts, {q: r for q, r in qrels.items() if q in queries})


def _load_beir_split(path: Path, split: str) -> Split:
    qrels = _read_qrels_tsv(path / "qrels" / f"{split}.tsv")
    file = path / "queries.jsonl"
    queries = keep_first(_read_queries_jsonl(file), file, "query")
    return _judged_queries(qrels, queries, path / "qrels" / f"{split}.tsv")


def _parse_answers(raw: str, where: str) -> list[str]:
    """A non-empty list of answer strings, as DPR writes it: ``['Denver Broncos', "Broncos"]``.
    Anything else (a set, a bare number, ``[]``, or ``['Denver' 'Broncos']``, which Python would
    silently glue into one string) is an error."""
    error = UserError(f"{where}: answers must be a non-empty list of quoted strings separated by commas, "
                      f"e.g. ['Denver Broncos']; fix: repair that line")
    try:
        tree = ast.parse(raw.strip(), mode="eval").body
        tokens = [t for t in tokenize.generate_tokens(StringIO(raw.strip()).readline)
                  if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER)]
    except (SyntaxError, tokenize.TokenError, ValueError):
        raise error from None
    if not isinstance(tree, ast.List) or not tree.elts:
        raise error
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in tree.elts):
        raise error
    # Between "[" and "]" the tokens must alternate string, comma, string, ... (a trailing comma is fine).
    inner = tokens[1:-1]
    if inner and inner[-1].string == ",":
        inner = inner[:-1]
    if any((t.type == tokenize.STRING) != (i % 2 == 0) for i, t in enumerate(inner)):
        raise error
    return [e.value for e in tree.elts]


def _load_dpr_split(path: Path, split: str) -> Split:
    """Questions from ``<split>.qa.tsv``; positives (qrels) from DPR training JSON when present."""
    result = Split({})
    json_file = first_file(path, [f"{split}.json", f"*-{split}.json"])
    if json_file is not None:
        for i, row in enumerate(_dpr_training_rows(json_file)):
            qid = f"{split}-{i}"
            result.queries[qid] = row["q"]
            result.answers[qid] = row["a"]
            result.qrels[qid] = {p: 1 for p in row["pos"]}
            result.negatives[qid] = row["neg"]
        return result
    qa_file = first_file(path, [f"{split}.qa.tsv", f"{split}.qa.csv", f"*-{split}.qa.csv", f"*-{split}.csv"])
    reader = csv.reader((line for _, line in read_lines(qa_file)), delimiter="\t")
    for i, row in enumerate(reader):
        if len(row) != 2:
            raise UserError(f"{qa_file}:{reader.line_num}: expected 'question<TAB>[answers]'; fix: repair that line")
        qid = f"{split}-{i}"
        result.queries[qid] = row[0]
        result.answers[qid] = _parse_answers(row[1], f"{qa_file}:{reader.line_num}")
    if not result.queries:
        raise UserError(f"{qa_file} holds no questions; fix: add 'question<TAB>[answers]' lines, or pick another split")
    return result


def _dpr_training_rows(json_file: Path) -> list[dict]:
    """DPR's biencoder JSON (several GB for NQ) in a compact form: question ``q``, answers ``a``,
    positive ids ``pos`` and hard-negative ids ``neg``. The JSON is streamed once (ijson) into a
    cached JSONL (``~/.cache/bm25aug/dpr``, keyed by the file's path, size and mtime); passage
    texts are dropped, since the corpus has them."""
    stat = json_file.stat()
    key = source_key("dpr-training-rows", str(json_file.resolve()), stat.st_size, stat.st_mtime_ns)
    # One cache file per source file: a changed source is cached again in its place, not beside it.
    cache = CACHE_ROOT / "dpr" / f"{json_file.stem}.{source_key(str(json_file.resolve()))[:24]}.jsonl"
    if not derived_ok(cache, key):
        import ijson

        def ids(ctxs) -> list[str]:
            return [str(c.get("passage_id") or c.get("psg_id")) for c in ctxs or []
                    if c.get("passage_id") or c.get("psg_id")]

        try:
            with open(json_file, "rb") as f, atomic_open(cache, "w") as out:
                for i, row in enumerate(progress(ijson.items(f, "item", use_float=True), desc=f"read {json_file.name}",
                                                 unit="q")):
                    if not isinstance(row.get("question"), str):
                        raise UserError(f"{json_file}: question {i} is not a string; fix: repair that entry")
                    check_text(row["question"], f"{json_file}: question {i}")
                    out.write(json.dumps({"q": row["question"], "a": [str(a) for a in row.get("answers", [])],
                                          "pos": ids(row.get("positive_ctxs")),
                                          "neg": ids(row.get("hard_negative_ctxs"))}) + "\n")
        except (ijson.JSONError, UnicodeDecodeError, KeyError, AttributeError, TypeError) as e:
            raise UserError(f"{json_file}: not DPR retriever-training JSON ({type(e).__name__}: {str(e)[:80]}); "
                            f"fix: re-download the file") from None
        record_derived(cache, key)
    return [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()]


def _load_msmarco_split(path: Path, split: str) -> Split:
    qrels = _read_qrels_tsv(path / f"qrels.{split}.tsv", trec=True)
    file = path / f"queries.{split}.tsv"
    queries = keep_first((line.rstrip("\n").partition("\t")[::2] for _, line in read_lines(file)), file, "query")
    return _judged_queries(qrels, queries, path / f"qrels.{split}.tsv")


# -------------------------------------------------------------------------------------- resolution


LOADERS = {"beir": _load_beir_split, "dpr": _load_dpr_split, "msmarco": _load_msmarco_split}
