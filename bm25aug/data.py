"""Datasets: one registry, three on-disk layouts, local copies first.

Layouts are recognized by their files, whatever the folder is called:

* ``beir``: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``
* ``dpr``: ``passages.tsv`` or ``psgs_w100.tsv`` (``id, text, title``), ``<split>.qa.tsv`` /
  ``*<split>.qa.csv`` (question, answer list) and DPR retriever-training JSON (``train.json``,
  ``*-train.json``) with ``positive_ctxs`` / ``hard_negative_ctxs``
* ``msmarco``: ``collection.tsv``, ``queries.<split>.tsv``, ``qrels.<split>.tsv``

A name resolves to ``--data-dir/<name>``, then ``$BM25AUG_DATA_DIR/<name>``, then
``~/.cache/bm25aug/datasets/<name>``, and only then is downloaded from its public source.
"""

from __future__ import annotations

import ast
import csv
import json
import logging
import os
import random
import shutil
import sys
import tokenize
import urllib.request
from dataclasses import dataclass, field
from functools import cached_property
from io import StringIO
from pathlib import Path

from bm25aug.corpus import Corpus, beir_row
from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, atomic_open, clean_stale, derived_ok, read_lines, record_derived, source_key, temp_sibling
from bm25aug.limits import check, check_text
from bm25aug.progress import progress

log = logging.getLogger(__name__)
csv.field_size_limit(sys.maxsize)

CACHE_DIR = CACHE_ROOT / "datasets"
BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
DPR_URL = "https://dl.fbaipublicfiles.com/dpr"


@dataclass(frozen=True)
class DatasetSpec:
    """What a dataset name means: its layout, where it comes from, what it transfers from."""

    layout: str
    urls: dict[str, str] = field(default_factory=dict)  # local file name -> public URL
    transfer_source: str | None = None  # default training set for ``eval.py --transfer``
    eval_split: str = "test"
    # Every query is also a corpus document: drop hits whose docid is the query id before
    # scoring, as Pyserini's BEIR regressions do (Anserini's -removeQuery).
    remove_query: bool = False


_DPR_PASSAGES = {"psgs_w100.tsv.gz": f"{DPR_URL}/wikipedia_split/psgs_w100.tsv.gz"}
REGISTRY: dict[str, DatasetSpec] = {
    "nq": DatasetSpec("dpr", {**_DPR_PASSAGES,
                              "train.json.gz": f"{DPR_URL}/data/retriever/biencoder-nq-train.json.gz",
                              "dev.json.gz": f"{DPR_URL}/data/retriever/biencoder-nq-dev.json.gz",
                              "test.qa.csv": f"{DPR_URL}/data/retriever/qas/nq-test.csv"}),
    "triviaqa": DatasetSpec("dpr", {**_DPR_PASSAGES,
                                    "train.json.gz": f"{DPR_URL}/data/retriever/biencoder-trivia-train.json.gz",
                                    "dev.json.gz": f"{DPR_URL}/data/retriever/biencoder-trivia-dev.json.gz",
                                    "test.qa.csv": f"{DPR_URL}/data/retriever/qas/trivia-test.csv"},
                            transfer_source="nq"),
    "entityquestions": DatasetSpec("dpr", {**_DPR_PASSAGES,
                                           "dataset.zip": "https://nlp.cs.princeton.edu/projects/entity-questions/dataset.zip"},
                                   transfer_source="nq"),
    "squad": DatasetSpec("dpr", transfer_source="nq"),
    "msmarco": DatasetSpec("msmarco", {"collectionandqueries.tar.gz":
                                       "https://msmarco.z22.web.core.windows.net/msmarcoranking/collectionandqueries.tar.gz"},
                           eval_split="dev"),
}
BEIR_NAMES = ["scifact", "nfcorpus", "fiqa", "arguana", "scidocs", "trec-covid", "webis-touche2020",
              "quora", "nq", "hotpotqa", "dbpedia-entity", "fever", "climate-fever", "cqadupstack"]
for _name in BEIR_NAMES:
    REGISTRY.setdefault(_name, DatasetSpec("beir", {f"{_name}.zip": BEIR_URL.format(name=_name)},
                                           remove_query=_name in ("arguana", "quora")))
REGISTRY["scifact"] = DatasetSpec("beir", {"scifact.zip": BEIR_URL.format(name="scifact")}, transfer_source="nfcorpus")
REGISTRY["nfcorpus"] = DatasetSpec("beir", {"nfcorpus.zip": BEIR_URL.format(name="nfcorpus")}, transfer_source="scifact")


@dataclass
class Split:
    """Queries of one split with what judges them: graded qrels and/or answer strings."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    answers: dict[str, list[str]] = field(default_factory=dict)
    negatives: dict[str, list[str]] = field(default_factory=dict)  # DPR's hard_negative_ctxs ids


def detect_layout(path: Path) -> str | None:
    """The layout of a local folder, judged by its files."""
    if (path / "corpus.jsonl").exists():
        return "beir"
    if _first(path, ["passages.tsv", "psgs_w100.tsv"]) is not None:
        return "dpr"
    if (path / "collection.tsv").exists():
        return "msmarco"
    return None


def _first(path: Path, patterns: list[str]) -> Path | None:
    for pattern in patterns:
        hits = sorted(path.glob(pattern))
        if hits:
            return hits[0]
    return None


class Dataset:
    """A retrieval dataset on local disk. Corpus and splits load lazily and are cached."""

    def __init__(self, name: str, path: Path, layout: str):
        self.name, self.path, self.layout = name, Path(path), layout
        self.spec = REGISTRY.get(name, DatasetSpec(layout))
        self._splits: dict[str, Split] = {}

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, {str(self.path)!r}, layout={self.layout!r})"

    @property
    def is_qa(self) -> bool:
        """QA sets are judged by answer strings (Acc@k), the others by qrels."""
        return self.layout == "dpr"

    @property
    def corpus_file(self) -> Path:
        """The file the corpus is read from (its bytes fingerprint the indexes built from it)."""
        if self.layout == "beir":
            return self.path / "corpus.jsonl"
        if self.layout == "msmarco":
            return self.path / "collection.tsv"
        return _first(self.path, ["passages.tsv", "psgs_w100.tsv"])

    @cached_property
    def corpus(self) -> Corpus:
        """Documents by id, read from disk as needed (``bm25aug.corpus``): never all in memory."""
        corpus = Corpus(self.corpus_file, self.layout)
        if not corpus:
            raise UserError(f"the corpus of {self.name} in {self.path} is empty; fix: check the dataset files")
        return corpus

    def splits(self) -> list[str]:
        if self.layout == "beir":
            return sorted(p.stem for p in (self.path / "qrels").glob("*.tsv"))
        if self.layout == "msmarco":
            return sorted(p.name.split(".")[1] for p in self.path.glob("qrels.*.tsv"))
        qa_files = [*self.path.glob("*.qa.*"), *self.path.glob("*.csv"), *self.path.glob("*.json")]
        names = {p.name.split(".")[0].split("-")[-1] for p in qa_files}
        return sorted(names)

    def split(self, name: str) -> Split:
        if name not in self._splits:
            if name not in self.splits():
                raise UserError(f"{self.name} has no split {name!r} (it has: {', '.join(self.splits()) or 'none'}); "
                                f"fix: pass --split with one of those")
            loader = {"beir": _load_beir_split, "dpr": _load_dpr_split, "msmarco": _load_msmarco_split}
            split = loader[self.layout](self.path, name)
            self._warn_unknown_docs(name, split)
            self._splits[name] = split
        return self._splits[name]

    def _warn_unknown_docs(self, name: str, split: Split) -> None:
        missing = sum(1 for rels in split.qrels.values() for d in rels if d not in self.corpus)
        if missing:
            log.warning("%s/%s: %d qrels name documents that are not in the corpus; they are ignored",
                        self.name, name, missing)
            for rels in split.qrels.values():
                for d in [d for d in rels if d not in self.corpus]:
                    del rels[d]

    def train_dev(self, dev_size: int, seed: int) -> tuple[Split, Split, str]:
        """Train and dev splits; without a dev split, a seeded slice of train (named in the 3rd value)."""
        train = self.split("train")
        if "dev" in self.splits():
            return train, self.split("dev"), "dev split"
        qids = sorted(q for q in train.queries if train.qrels.get(q))
        rng = random.Random(seed)
        rng.shuffle(qids)
        n = min(dev_size, len(qids) // 5)
        dev_ids, train_ids = set(qids[:n]), set(qids[n:])

        def subset(ids: set[str]) -> Split:
            return Split({q: t for q, t in train.queries.items() if q in ids},
                         {q: r for q, r in train.qrels.items() if q in ids},
                         {q: a for q, a in train.answers.items() if q in ids},
                         {q: n for q, n in train.negatives.items() if q in ids})

        return subset(train_ids), subset(dev_ids), f"seeded slice of train (seed {seed}, {n} queries)"


# ----------------------------------------------------------------------------------------- loaders
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
    json_file = _first(path, [f"{split}.json", f"*-{split}.json"])
    if json_file is not None:
        for i, row in enumerate(_dpr_training_rows(json_file)):
            qid = f"{split}-{i}"
            result.queries[qid] = row["q"]
            result.answers[qid] = row["a"]
            result.qrels[qid] = {p: 1 for p in row["pos"]}
            result.negatives[qid] = row["neg"]
        return result
    qa_file = _first(path, [f"{split}.qa.tsv", f"{split}.qa.csv", f"*-{split}.qa.csv", f"*-{split}.csv"])
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
def search_dirs(data_dir: str | Path | None = None) -> list[Path]:
    dirs = [Path(data_dir)] if data_dir else []
    if os.environ.get("BM25AUG_DATA_DIR"):
        dirs.append(Path(os.environ["BM25AUG_DATA_DIR"]))
    return dirs + [CACHE_DIR]


def load_dataset(name_or_path: str, data_dir: str | Path | None = None, download: bool = True) -> Dataset:
    """Resolve a dataset name (or a folder path) to a local ``Dataset``, downloading if needed."""
    as_path = Path(name_or_path)
    if as_path.is_dir() and detect_layout(as_path):
        return Dataset(as_path.name, as_path, detect_layout(as_path))
    name = name_or_path.lower()
    tried = []
    for base in search_dirs(data_dir):
        # The name as given first (a folder named CISI on a case-sensitive disk), then lowercased.
        candidate = next((base / n for n in dict.fromkeys([name_or_path, name]) if (base / n).is_dir()), base / name)
        tried.append(str(candidate))
        if candidate.is_dir():
            layout = detect_layout(candidate)
            if layout is None:
                raise UserError(f"{candidate} exists but holds no corpus.jsonl, passages.tsv or collection.tsv; "
                                f"fix: put the dataset files there (BEIR, DPR or MS MARCO layout)")
            return Dataset(name, candidate, layout)
    if name not in REGISTRY:
        raise UserError(f"unknown dataset {name_or_path!r} and no local copy in: {', '.join(tried)}; "
                        f"fix: use one of {', '.join(sorted(REGISTRY))}, or pass --data-dir with a folder <name>/ in it")
    spec = REGISTRY[name]
    where = f"put a copy in {tried[0]} (or pass --data-dir / set BM25AUG_DATA_DIR)"
    if not spec.urls or not download:
        raise UserError(f"dataset {name!r} not found in: {', '.join(tried)}; fix: {where}")
    target = CACHE_DIR / name
    try:
        _download(spec, target)
    except OSError as e:
        files = "; ".join(f"{f} <- {u}" for f, u in spec.urls.items())
        raise UserError(f"dataset {name!r} not found locally ({', '.join(tried)}) and the download failed ({e}); "
                        f"fix: fetch {files} (unpacked) into {target}, or {where}") from None
    return Dataset(name, target, spec.layout)


def _download(spec: DatasetSpec, target: Path) -> None:
    """Fetch and unpack every file of ``spec`` into a temporary folder, then rename it to ``target``."""
    from bm25aug.progress import progress

    target.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(target)
    tmp = temp_sibling(target, "tmp")
    tmp.mkdir()
    try:
        for fname, url in spec.urls.items():
            dest = tmp / fname
            with urllib.request.urlopen(url, timeout=30) as resp, open(dest, "wb") as out:
                total = int(resp.headers.get("Content-Length") or 0) or None
                with progress(total=total, unit="B", unit_scale=True, desc=f"download {fname}") as bar:
                    while chunk := resp.read(1 << 20):
                        out.write(chunk)
                        bar.update(len(chunk))
            _unpack(dest, tmp)
        _flatten_single_subdir(tmp)
        if detect_layout(tmp) is None:
            raise OSError(f"downloaded files from {list(spec.urls.values())} are not in a known layout")
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack(file: Path, into: Path) -> None:
    import gzip

    if file.suffix == ".zip" or file.name.endswith((".tar.gz", ".tgz")):
        shutil.unpack_archive(str(file), str(into))
        file.unlink()
    elif file.suffix == ".gz":
        with gzip.open(file, "rb") as src, open(file.with_suffix(""), "wb") as dst:
            shutil.copyfileobj(src, dst)
        file.unlink()


def _flatten_single_subdir(path: Path) -> None:
    """Archives such as BEIR's unpack to ``<name>/...``; move that folder's files up one level."""
    entries = list(path.iterdir())
    if len(entries) == 1 and entries[0].is_dir():
        for child in entries[0].iterdir():
            child.rename(path / child.name)
        entries[0].rmdir()
