"""Lucene indexes under ``indexes/<dataset>.<flavor>/``, built with Anserini's ``IndexCollection``.

Two flavors:

* ``flat``: Lucene's default English analyzer (Porter stemming, stopwords), as Pyserini's BEIR
  "flat" regressions.
* ``wp``: bert-base-uncased WordPiece tokens, pre-tokenized in Python and indexed with the
  whitespace analyzer, so every index term is a vocabulary entry the model can predict.

An index is written to a temporary sibling folder and renamed when complete; ``meta.json`` records
how it was built. ``bm25aug.doc_terms`` reads back what the torch scorer needs, on demand.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from bm25aug.progress import progress

from bm25aug.data import Dataset
from filelock import FileLock

from bm25aug.errors import UserError
from bm25aug.io import atomic_dir, temp_sibling
from bm25aug.java import JNI_LOCK, jclass
from bm25aug.lucene import DOCIDS_FILE, write_docids
from bm25aug.pretokenize import tokenized_batches
from bm25aug.tokenization import load_tokenizer, tokenizer_name, untruncated, vocab_hash

log = logging.getLogger(__name__)
FLAVORS = ("flat", "wp")
INDEX_ROOT = Path(os.environ.get("BM25AUG_INDEX_ROOT", "indexes"))
META_FILE = "meta.json"
# Lucene's indexing RAM buffer (Anserini's default is 4 GB): flushed as a segment when full, so a
# build's memory stays bounded whatever the corpus size; -optimize merges the segments at the end.
MEMORY_BUFFER_MB = 1024


@dataclass
class IndexMeta:
    flavor: str
    dataset: str
    num_docs: int
    tokenizer: str | None = None
    vocab_hash: str | None = None
    threads: int = 1
    build_seconds: float = 0.0
    corpus_fingerprint: str = ""
    anserini: str = "IndexCollection JsonCollection DefaultLuceneDocumentGenerator"
    docvectors: bool = False  # stored document vectors, which Pyserini's RM3 and Rocchio need
    stock: bool = False  # built elsewhere (Pyserini/Anserini); bm25aug never writes into it

    @classmethod
    def load(cls, index_dir: str | Path, tokenizer=None, flavor: str | None = None) -> "IndexMeta":
        """The index's ``meta.json``. A stock Lucene index has none (Pyserini's prebuilt indexes,
        ``python -m pyserini.index.lucene``): it is ``flavor``, else ``wp`` when the caller names the
        tokenizer it was built with, else ``flat``."""
        path = Path(index_dir) / META_FILE
        if path.exists():
            return cls(**json.loads(path.read_text()))
        if not (Path(index_dir).is_dir() and any(Path(index_dir).glob("segments_*"))):
            raise UserError(f"{index_dir} is not a Lucene index (no segments_* file); "
                            f"fix: build it with `bm25aug index --dataset NAME --flavor wp|flat`")
        flavor = flavor or ("wp" if tokenizer is not None else "flat")
        if flavor not in FLAVORS:
            raise UserError(f"unknown index flavor {flavor!r}; fix: use one of {', '.join(FLAVORS)}")
        meta = cls(flavor, Path(index_dir).name, 0, stock=True, anserini="stock index (no meta.json)")
        if flavor == "wp":
            if tokenizer is None:
                raise UserError(f"{index_dir} is a stock index without meta.json; searching it as a WordPiece "
                                f"index needs its tokenizer; fix: pass --tokenizer NAME (e.g. bert-base-uncased)")
            meta.tokenizer, meta.vocab_hash = tokenizer_name(tokenizer), vocab_hash(tokenizer)
        return meta


def index_path(dataset_name: str, flavor: str, root: str | Path | None = None) -> Path:
    return Path(root or INDEX_ROOT) / f"{dataset_name}.{flavor}"


def corpus_fingerprint(dataset: Dataset) -> str:
    """Hash of the corpus file's bytes: any edit, even one that keeps every length, rebuilds."""
    h = hashlib.blake2b(digest_size=16)
    with open(dataset.corpus_file, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _is_current(path: Path, fingerprint: str) -> bool:
    """Built by bm25aug from this very corpus, with what the flavor needs today (flat: document
    vectors for RM3/Rocchio, which older builds lack)."""
    if not (path / META_FILE).exists():
        return False
    meta = IndexMeta.load(path)
    return meta.corpus_fingerprint == fingerprint and (meta.docvectors or meta.flavor != "flat")


def ensure_index(dataset: Dataset, flavor: str, root: str | Path | None = None, threads: int | None = None,
                 tokenizer=None, force: bool = False) -> Path:
    """The index of ``dataset`` in ``flavor``: reused when built from this very corpus, else built.

    A folder at that path that bm25aug did not write (no ``meta.json``) is never touched: that is
    an error unless ``force``. Two processes asking for the same index take turns on a file lock;
    the second one reuses what the first built."""
    path = index_path(dataset.name, flavor, root)
    fingerprint = corpus_fingerprint(dataset)
    if not force and _is_current(path, fingerprint):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent / f".{path.name}.lock")):
        if not force and _is_current(path, fingerprint):
            return path  # built by another process while we waited
        if path.exists() and not force and not (path / META_FILE).exists():
            raise UserError(f"{path} exists but was not built by bm25aug (no {META_FILE}); it is left untouched; "
                            f"fix: pass --index-root DIR to use another folder, or rebuild it with "
                            f"`bm25aug index --dataset {dataset.name} --flavor {flavor} --force`")
        if (path / META_FILE).exists() and not force:
            log.warning("%s was built from another version of the corpus, or without what it needs now "
                        "(flat: document vectors); rebuilding", path)
        return build_index(dataset, flavor, path, threads=threads, tokenizer=tokenizer, fingerprint=fingerprint,
                           force=force)


def build_index(dataset: Dataset, flavor: str, path: str | Path, threads: int | None = None,
                tokenizer=None, fingerprint: str | None = None, force: bool = False) -> Path:
    """Write the corpus as JSONL shards, index them with Anserini, then rename into place.
    An existing folder is replaced only if bm25aug built it, or with ``force``."""
    if flavor not in FLAVORS:
        raise UserError(f"unknown index flavor {flavor!r}; fix: use one of {', '.join(FLAVORS)}")
    path = Path(path)
    threads = threads or max(1, os.cpu_count() or 1)
    start = time.perf_counter()
    meta = IndexMeta(flavor, dataset.name, len(dataset.corpus), threads=threads,
                     corpus_fingerprint=fingerprint or corpus_fingerprint(dataset))
    if flavor == "wp":
        tokenizer = tokenizer or load_tokenizer()
        meta.tokenizer, meta.vocab_hash = tokenizer_name(tokenizer), vocab_hash(tokenizer)
    fix = (f"pass --index-root DIR to build elsewhere, or add --force to replace it "
           f"(`bm25aug index --dataset {dataset.name} --flavor {flavor} --force`)")
    path.parent.mkdir(parents=True, exist_ok=True)
    log.info("building %s index of %s at %s", flavor, dataset.name, path)
    shards = temp_sibling(path, "building")
    try:
        with atomic_dir(path, None if force else META_FILE, what="an index built by bm25aug", fix=fix) as work:
            _write_shards(dataset, shards, threads, tokenizer if flavor == "wp" else None)
            args = ["-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
                    "-input", str(shards), "-index", str(work), "-threads", str(threads),
                    "-storeRaw", "-optimize", "-quiet", "-memoryBuffer", str(MEMORY_BUFFER_MB)]
            if flavor == "wp":
                args.append("-pretokenized")
            else:  # Pyserini's RM3/Rocchio read them; see the README for the size they cost
                args.append("-storeDocvectors")
                meta.docvectors = True
            with progress(total=1, desc=f"lucene index {path.name}", unit="index") as bar, JNI_LOCK:
                jclass("io.anserini.index.IndexCollection").main(args)
                bar.update(1)
            write_docids(work)
            meta.build_seconds = round(time.perf_counter() - start, 3)
            (work / META_FILE).write_text(json.dumps(asdict(meta), indent=2))
    finally:
        shutil.rmtree(shards, ignore_errors=True)
    return path


_POOL_FROM = 100_000  # documents; below this, worker processes cost more to start than they save


def _write_shards(dataset: Dataset, folder: Path, shards: int, tokenizer) -> Path:
    """One JSONL file per indexing thread (Anserini parallelizes over files), written from the
    corpus streamed in batches, so memory stays bounded whatever the corpus size. A wp build
    tokenizes in ``shards`` worker processes for large corpora (``bm25aug.pretokenize``)."""
    folder.mkdir(parents=True)
    files = [open(folder / f"part{i:03d}.jsonl", "w", encoding="utf-8") for i in range(shards)]
    ids: deque[list[str]] = deque()

    def texts():
        for chunk in dataset.corpus.batches(8192):
            ids.append([docid for docid, _ in chunk])
            yield [doc.contents for _, doc in chunk]

    stream = texts()
    if tokenizer is not None:
        stream = tokenized_batches(untruncated(tokenizer), stream, shards if len(dataset.corpus) >= _POOL_FROM else 1)
    n = 0
    try:
        for contents in progress(stream, total=-(-len(dataset.corpus) // 8192), desc=f"prepare {dataset.name}",
                                 unit="batch"):
            for docid, text in zip(ids.popleft(), contents):
                files[n % shards].write(json.dumps({"id": docid, "contents": text}) + "\n")
                n += 1
    finally:
        for f in files:
            f.close()
    return folder


def index_size(index_dir: str | Path) -> dict[str, int]:
    """Bytes of the Lucene index (bm25aug's own caches beside it not counted), and of its
    term-vector files (the stored document vectors that RM3/Rocchio need: ``.tvd/.tvx/.tvm``)."""
    ours = {META_FILE, DOCIDS_FILE}
    files = [p for p in Path(index_dir).rglob("*") if p.is_file() and p.name not in ours]
    return {"total": sum(p.stat().st_size for p in files),
            "docvectors": sum(p.stat().st_size for p in files if p.suffix in (".tvd", ".tvx", ".tvm"))}


def check_vocab(index_dir: str | Path, tokenizer) -> IndexMeta:
    """A ``wp`` index searched with another vocabulary would silently match the wrong terms."""
    meta = IndexMeta.load(index_dir, tokenizer)
    if meta.flavor == "wp" and meta.vocab_hash != vocab_hash(tokenizer):
        raise UserError(f"{index_dir} was built with vocabulary {meta.vocab_hash} but the tokenizer has "
                        f"{vocab_hash(tokenizer)}; fix: rebuild the index with this tokenizer or use the matching one")
    return meta
