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

import csv
import logging
import os
import random
import shutil
import sys
import urllib.request
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from bm25aug.data.corpus import Corpus
from bm25aug.data.layouts import LOADERS, Split, first_file
from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, clean_stale, digest, temp_sibling

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
    # The data's license, where it is known here (a model trained on it is shipped only under
    # licenses that allow it: bm25aug.model.packaged; ../shared/data's README names them).
    license: str = ""


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
    "squad": DatasetSpec("dpr", transfer_source="nq", license="CC BY-SA 4.0"),
    "msmarco": DatasetSpec("msmarco", {"collectionandqueries.tar.gz":
                                       "https://msmarco.z22.web.core.windows.net/msmarcoranking/collectionandqueries.tar.gz"},
                           eval_split="dev"),
}
BEIR_NAMES = ["scifact", "nfcorpus", "fiqa", "arguana", "scidocs", "trec-covid", "webis-touche2020",
              "quora", "nq", "hotpotqa", "dbpedia-entity", "fever", "climate-fever", "cqadupstack"]
for _name in BEIR_NAMES:
    REGISTRY.setdefault(_name, DatasetSpec("beir", {f"{_name}.zip": BEIR_URL.format(name=_name)},
                                           remove_query=_name in ("arguana", "quora")))
# Converted sets with no download here: a local copy only (../shared/data's README says where each
# comes from). SQuADShifts: new SQuAD-style questions on Wikipedia, Reddit and Amazon text (Miller
# et al., 2020), so a SQuAD model is their transfer source; MedQuAD: NIH consumer-health answers.
for _name in ("squadshifts-wiki", "squadshifts-reddit", "squadshifts-amazon"):
    REGISTRY[_name] = DatasetSpec("dpr", transfer_source="squad", license="CC BY 4.0")
REGISTRY["medquad"] = DatasetSpec("beir", license="CC BY 4.0")
REGISTRY["scifact"] = DatasetSpec("beir", {"scifact.zip": BEIR_URL.format(name="scifact")}, transfer_source="nfcorpus",
                                  license="CC BY-NC 2.0")
REGISTRY["nfcorpus"] = DatasetSpec("beir", {"nfcorpus.zip": BEIR_URL.format(name="nfcorpus")}, transfer_source="scifact",
                                   license="free for academic use (Boteva et al., 2016)")


def layouts_in(path: Path) -> list[str]:
    """Every layout whose corpus file the folder holds, in the order ``detect_layout`` prefers them."""
    found = [("beir", (path / "corpus.jsonl").exists()),
             ("dpr", first_file(path, ["passages.tsv", "psgs_w100.tsv"]) is not None),
             ("msmarco", (path / "collection.tsv").exists())]
    return [layout for layout, there in found if there]


def detect_layout(path: Path) -> str | None:
    """The layout of a local folder, judged by its files (BEIR's first, then DPR's, then MS MARCO's)."""
    return next(iter(layouts_in(path)), None)


# What a split of each layout is read from (for the error that names a missing one).
SPLIT_FILES = {"beir": "qrels/<split>.tsv", "dpr": "<split>.qa.tsv (or DPR's <split>.json)",
               "msmarco": "qrels.<split>.tsv with queries.<split>.tsv"}


class Dataset:
    """A retrieval dataset on local disk. Corpus and splits load lazily and are cached."""

    def __init__(self, name: str, path: Path, layout: str):
        self.name, self.path, self.layout = name, Path(path), layout
        self.spec = REGISTRY.get(name, DatasetSpec(layout))
        self._splits: dict[str, Split] = {}
        if others := [other for other in layouts_in(self.path) if other != layout]:
            log.warning("%s holds the corpus files of several layouts (%s); it is read as %s", self.path,
                        ", ".join([layout, *others]), layout)

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
        return first_file(self.path, ["passages.tsv", "psgs_w100.tsv"])

    @cached_property
    def corpus(self) -> Corpus:
        """Documents by id, read from disk as needed (``bm25aug.data.corpus``): never all in memory."""
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
                raise self._no_split(name)
            loader = LOADERS
            split = loader[self.layout](self.path, name)
            self._warn_unknown_docs(name, split)
            self._splits[name] = split
        return self._splits[name]

    def _no_split(self, name: str) -> UserError:
        """The error for a split the folder lacks, with the fix that fits: another split, the file
        that would hold it, or one layout per folder."""
        others = [layout for layout in layouts_in(self.path) if layout != self.layout]
        if others:
            return UserError(f"{self.path} holds the corpus files of {len(others) + 1} layouts ({self.layout}, "
                             f"{', '.join(others)}) and is read as {self.layout}, which has no split {name!r} (it looks "
                             f"for {SPLIT_FILES[self.layout]}); fix: keep one dataset layout per folder")
        if have := self.splits():
            return UserError(f"{self.name} has no split {name!r} (it has: {', '.join(have)}); fix: pass --split with "
                             f"one of those")
        return UserError(f"{self.name} ({self.path}, {self.layout} layout) has no judged split: no "
                         f"{SPLIT_FILES[self.layout]} file; fix: add {SPLIT_FILES[self.layout].replace('<split>', name)}")

    def _warn_unknown_docs(self, name: str, split: Split) -> None:
        """Judgements of documents the corpus lacks move to ``split.absent``: training leaves them
        out, evaluation still counts them (and their queries), as trec_eval does."""
        for qid, rels in split.qrels.items():
            if absent := {d: g for d, g in rels.items() if d not in self.corpus}:
                split.absent[qid] = absent
                for d in absent:
                    del rels[d]
        if split.absent:
            pairs = sum(map(len, split.absent.values()))
            emptied = sum(1 for q in split.absent if not split.qrels[q])
            example = next(iter(next(iter(split.absent.values()))))
            log.warning("%s/%s: %d judgements of %d queries name documents absent from the corpus (e.g. %r); they "
                        "are scored as trec_eval scores them (%d queries judge nothing else and score 0) and left "
                        "out of training", self.name, name, pairs, len(split.absent), example, emptied)

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
            return Split(*({q: v for q, v in part.items() if q in ids}
                           for part in (train.queries, train.qrels, train.answers, train.negatives, train.absent)))

        return subset(train_ids), subset(dev_ids), f"seeded slice of train (seed {seed}, {n} queries)"


# ----------------------------------------------------------------------------------------- loaders
def corpus_fingerprint(dataset: Dataset) -> str:
    """Hash of the corpus file's bytes: what an index built from it records (a folder's ``meta.json``,
    a cluster index's record), so that any edit, even one that keeps every length, rebuilds."""
    return digest(dataset.corpus_file)


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
