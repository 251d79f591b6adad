"""Lucene indexes under ``indexes/<dataset>.<flavor>/``, built with Anserini's ``IndexCollection``.

Three flavors:

* ``flat``: Lucene's default English analyzer (Porter stemming, stopwords), as Pyserini's BEIR
  "flat" regressions; one ``contents`` field, title and text joined.
* ``wp``: bert-base-uncased WordPiece tokens, pre-tokenized in Python and indexed with the
  whitespace analyzer, so every index term is a vocabulary entry the model can predict.
* ``multifield``: Pyserini's BEIR "multifield" layout: Anserini's ``BeirMultifieldCollection``
  indexes the text as ``contents`` and the title as a separate ``title`` field, both with the
  English analyzer (``-fields title``); searched as ``contents^1 title^1``. A document with an
  empty text is left out, as Anserini leaves it out. DPR's title is the passage's article title;
  MS MARCO passages and a corpus without any title have none, so they have no multifield index.

Stock indexes of other kinds (Anserini's impact indexes, dense ones) are recognised only to be
refused (``bm25aug.lucene.flavors``).

An index is written to a temporary sibling folder and renamed when complete; ``meta.json`` records
how it was built. ``bm25aug.lucene.doc_terms`` reads back what the torch scorer needs, on demand.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from bm25aug.data.registry import Dataset, corpus_fingerprint, load_dataset

from bm25aug.errors import UserError
from bm25aug.index_meta import IndexRecord
from bm25aug.locations import CLUSTER, index_location, url_scheme
from bm25aug.progress import progress
from bm25aug.io import atomic_dir, clean_stale, temp_sibling, write_json
from bm25aug.outputs import check_outputs
from bm25aug.lucene.jvm import JNI_LOCK, interruptible, jclass
from bm25aug.limits import check_choice
from bm25aug.lucene.docids import DOCIDS_FILE, write_docids
from bm25aug.lucene.flavors import check_flavor, not_lucene
from bm25aug.bm25_defaults import TITLE_FIELD
from bm25aug.lucene.opening import open_reader
from bm25aug.lucene.pretokenize import tokenized_batches
from bm25aug.tokenization import load_tokenizer, normalization, tokenizer_name, untruncated, vocab_hash

log = logging.getLogger(__name__)
FLAVORS = ("flat", "wp", "multifield")  # what `bm25aug index --flavor` builds and bm25aug searches
INDEX_ROOT = Path(os.environ.get("BM25AUG_INDEX_ROOT", "indexes"))
META_FILE = "meta.json"
# Lucene's indexing RAM buffer (Anserini's default is 4 GB): flushed as a segment when full, so a
# build's memory stays bounded whatever the corpus size; -optimize merges the segments at the end.
# 256 MB: a flat build of 1M passages buffered about 250 MB under the former 1 GB; more only grows
# the heap (under the JVM's -Xmx2g, bm25aug.lucene.jvm) of larger corpora, whose segments are merged anyway.
MEMORY_BUFFER_MB = 256


@dataclass
class IndexMeta(IndexRecord):
    """A Lucene index folder's ``IndexRecord``: its ``meta.json``, or what a stock index's own fields say."""

    @classmethod
    def load(cls, index_dir: str | Path, tokenizer=None, flavor: str | None = None, probe: bool = True) -> "IndexMeta":
        """The index's ``meta.json``. A stock Lucene index has none (Pyserini's prebuilt indexes,
        ``python -m pyserini.index.lucene``): it is ``flavor``, else what its fields say (multifield
        when it has a title field), else ``wp`` when the caller names the tokenizer it was built
        with, else ``flat``. Either way its own fields and terms must not say otherwise
        (``bm25aug.lucene.flavors``; ``probe=False`` skips that, for a caller that only reads the record)."""
        path = Path(index_dir) / META_FILE
        if path.exists():
            try:
                meta = cls(**json.loads(path.read_text(encoding="utf-8")))
            except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as e:
                raise UserError(f"{path} is not a valid index description ({type(e).__name__}); fix: rebuild the "
                                f"index with `bm25aug index --dataset NAME --force`") from None
            check_choice(f"index flavor in {path}", meta.flavor, FLAVORS)
            if probe:
                check_flavor(Path(index_dir), meta.flavor, tokenizer, stock=False)
            return meta
        if (error := not_lucene(index_dir)) is not None:
            raise error
        if flavor is not None:
            check_choice("index flavor", flavor, FLAVORS)
        flavor = check_flavor(Path(index_dir), flavor, tokenizer, stock=True)
        meta = cls(flavor, Path(index_dir).name, 0, stock=True, anserini="stock index (no meta.json)")
        if flavor == "wp":
            if tokenizer is None:
                raise UserError(f"{index_dir} is a stock index without meta.json; searching it as a WordPiece "
                                f"index needs its tokenizer; fix: pass --tokenizer NAME (e.g. bert-base-uncased)")
            meta.tokenizer, meta.vocab_hash = tokenizer_name(tokenizer), vocab_hash(tokenizer)
            meta.normalization = normalization(tokenizer)
        return meta


def index_path(dataset_name: str, flavor: str, root: str | Path | None = None) -> Path:
    """Where ``dataset_name``'s ``flavor`` index folder is, under ``root`` (a folder, never a URL:
    training and adapt read Lucene's files, which a cluster does not lend)."""
    if root is not None and index_location(str(root)) == CLUSTER:  # the URL itself is not echoed: it may hold credentials
        raise UserError(f"--index-root takes a folder, and {url_scheme(root)} is a URL; training "
                        f"and adapt read an index folder, not a cluster; fix: drop --index-root (indexes/) or pass a "
                        f"folder, and search the cluster with `bm25aug search --index URL`")
    return Path(root or INDEX_ROOT) / f"{dataset_name}.{flavor}"


def _is_current(path: Path, fingerprint: str) -> bool:
    """Built by bm25aug from this very corpus, with what the flavor needs today (flat: document
    vectors for RM3/Rocchio, which older builds lack)."""
    if not (path / META_FILE).exists():
        return False
    meta = IndexMeta.load(path, probe=False)
    return meta.corpus_fingerprint == fingerprint and (meta.docvectors or meta.flavor == "wp")


def ensure_index(dataset: Dataset, flavor: str, root: str | Path | None = None, threads: int | None = None,
                 tokenizer=None, force: bool = False) -> Path:
    """The index of ``dataset`` in ``flavor``: reused when built from this very corpus, else built.

    A folder at that path that bm25aug did not write (no ``meta.json``) is never touched: that is
    an error unless ``force``. Two processes asking for the same index take turns on a file lock;
    the second one reuses what the first built."""
    check_choice("index flavor", flavor, FLAVORS)
    path = index_path(dataset.name, flavor, root)
    check_outputs({"the index": path}, {"the dataset": dataset.path}, folders=("the index",))
    fingerprint = corpus_fingerprint(dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)  # temporaries of a killed build, also when the index it left is reused
    if not force and _is_current(path, fingerprint):
        return path
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
    check_choice("index flavor", flavor, FLAVORS)
    if flavor == "multifield":
        check_titles(dataset)
    path = Path(path)
    threads = threads or max(1, os.cpu_count() or 1)
    start = time.perf_counter()
    meta = IndexMeta(flavor, dataset.name, len(dataset.corpus), threads=threads,
                     corpus_fingerprint=fingerprint or corpus_fingerprint(dataset))
    if flavor == "wp":
        tokenizer = tokenizer or load_tokenizer()
        meta.tokenizer, meta.vocab_hash = tokenizer_name(tokenizer), vocab_hash(tokenizer)
        meta.normalization = normalization(tokenizer)
    fix = (f"pass --index-root DIR to build elsewhere, or add --force to replace it "
           f"(`bm25aug index --dataset {dataset.name} --flavor {flavor} --force`)")
    path.parent.mkdir(parents=True, exist_ok=True)
    log.info("building %s index of %s at %s", flavor, dataset.name, path)
    shards = temp_sibling(path, "building")
    try:
        with atomic_dir(path, None if force else META_FILE, what="an index built by bm25aug", fix=fix) as work:
            _write_shards(dataset, shards, threads, tokenizer if flavor == "wp" else None, flavor == "multifield")
            collection = "BeirMultifieldCollection" if flavor == "multifield" else "JsonCollection"
            args = ["-collection", collection, "-generator", "DefaultLuceneDocumentGenerator",
                    "-input", str(shards), "-index", str(work), "-threads", str(threads),
                    "-storeRaw", "-optimize", "-quiet", "-memoryBuffer", str(MEMORY_BUFFER_MB)]
            if flavor == "multifield":  # Pyserini's prebuilt multifield BEIR indexes: -fields title
                args += ["-fields", TITLE_FIELD]
                meta.anserini = f"IndexCollection {collection} DefaultLuceneDocumentGenerator -fields {TITLE_FIELD}"
            if flavor == "wp":
                args.append("-pretokenized")
            else:  # Pyserini's RM3/Rocchio read them; see the README for the size they cost
                args.append("-storeDocvectors")
                meta.docvectors = True
            with progress(total=1, desc=f"lucene index {path.name}", unit="index") as bar:
                interruptible(jclass("io.anserini.index.IndexCollection").main, args)
                bar.update(1)
            reader = open_reader(work)
            try:
                write_docids(work, reader)
                meta.num_docs = int(reader.maxDoc())  # multifield: Anserini leaves out documents without text
            finally:
                with JNI_LOCK:
                    reader.close()
            meta.build_seconds = round(time.perf_counter() - start, 3)
            write_json(work / META_FILE, asdict(meta))
    finally:
        shutil.rmtree(shards, ignore_errors=True)
    return path


_POOL_FROM = 100_000  # documents; below this, worker processes cost more to start than they save


def check_titles(dataset: Dataset) -> None:
    """A multifield index needs titles: MS MARCO passages have none, and a corpus whose titles are
    all empty would give a flat index without its title field."""
    if dataset.layout == "msmarco" or not any(doc.title.strip() for _, doc in dataset.corpus.items()):
        why = "MS MARCO passages have no title" if dataset.layout == "msmarco" else "no document has a title"
        raise UserError(f"{dataset.name} has no multifield index: {why}, so its title field would be empty; "
                        f"fix: use its flat index (`bm25aug index --dataset {dataset.name} --flavor flat`)")


def _write_shards(dataset: Dataset, folder: Path, shards: int, tokenizer, multifield: bool = False) -> Path:
    """One JSONL file per indexing thread (Anserini parallelizes over files), written from the
    corpus streamed in batches, so memory stays bounded whatever the corpus size. A wp build
    tokenizes in ``shards`` worker processes for large corpora (``bm25aug.lucene.pretokenize``).
    A multifield build writes BEIR's own lines (``_id``, ``title``, ``text``; DPR: the passage's
    article title), which ``BeirMultifieldCollection`` reads."""
    folder.mkdir(parents=True)
    files = [open(folder / f"part{i:03d}.jsonl", "w", encoding="utf-8") for i in range(shards)]
    ids: deque[list[str]] = deque()

    def texts():
        for chunk in dataset.corpus.batches(8192):
            ids.append([docid for docid, _ in chunk])
            yield [(doc.title, doc.text) if multifield else doc.contents for _, doc in chunk]

    stream = texts()
    if tokenizer is not None:
        stream = tokenized_batches(untruncated(tokenizer), stream, shards if len(dataset.corpus) >= _POOL_FROM else 1)
    n = 0
    try:
        for contents in progress(stream, total=-(-len(dataset.corpus) // 8192), desc=f"prepare {dataset.name}",
                                 unit="batch"):
            for docid, text in zip(ids.popleft(), contents):
                row = {"_id": docid, "title": text[0], "text": text[1]} if multifield else {"id": docid, "contents": text}
                files[n % shards].write(json.dumps(row) + "\n")
                n += 1
    finally:
        for f in files:
            f.close()
    return folder


def index_size(index_dir: str | Path) -> dict[str, int]:
    """Bytes of the Lucene index (bm25aug's own caches beside it not counted), and of its
    term-vector files (the stored document vectors that RM3/Rocchio need: ``.tvd/.tvx/.tvm``)."""
    ours = {META_FILE, DOCIDS_FILE, f"{DOCIDS_FILE}.source.json"}
    files = [p for p in Path(index_dir).rglob("*") if p.is_file() and p.name not in ours]
    return {"total": sum(p.stat().st_size for p in files),
            "docvectors": sum(p.stat().st_size for p in files if p.suffix in (".tvd", ".tvx", ".tvm"))}


def check_vocab(meta: IndexMeta, tokenizer, index_dir: str | Path) -> None:
    """A ``wp`` index (``meta``) searched with another vocabulary, or the same vocabulary with
    other casing or splitting, would silently match the wrong terms."""
    if meta.flavor == "wp" and meta.vocab_hash != vocab_hash(tokenizer):
        raise UserError(f"{index_dir} was built with vocabulary {meta.vocab_hash} but the tokenizer has "
                        f"{vocab_hash(tokenizer)}; fix: rebuild the index with this tokenizer or use the matching one")
    if meta.flavor == "wp" and meta.normalization and meta.normalization != normalization(tokenizer):
        raise UserError(f"{index_dir} was built by a tokenizer that normalizes text differently (casing, accents or "
                        f"punctuation) from this one, though both have the same vocabulary; fix: use the tokenizer "
                        f"the index was built with ({meta.tokenizer})")


def verify_index(index_dir: str | Path, dataset: Dataset, docids) -> None:
    """An index given by path must be the dataset's: built from this very corpus (bm25aug's
    ``meta.json`` records its fingerprint), or, for a stock index that records none, holding
    exactly the corpus's document ids (checked instead, and said once)."""
    fix = (f"pass the index built from {dataset.name}'s corpus, or leave out --index to use (or build) "
           f"`bm25aug index --dataset {dataset.name}`")
    if (Path(index_dir) / META_FILE).exists():
        meta = IndexMeta.load(index_dir, probe=False)  # searched already: its terms were checked
        if meta.corpus_fingerprint != corpus_fingerprint(dataset):
            source = (f"dataset {meta.dataset!r}" if meta.dataset != dataset.name
                      else f"another version of {dataset.name}'s corpus")
            raise UserError(f"{index_dir} was built from {source}, not from {dataset.corpus_file}; fix: {fix}")
        return
    known = dataset.corpus.has(docids)
    if not known.all():
        raise UserError(f"{index_dir} holds {len(docids):,} documents, {int((~known).sum()):,} of them unknown to "
                        f"{dataset.name}'s corpus of {len(dataset.corpus):,} (e.g. {docids[~known][0]!r}); fix: {fix}")
    if len(docids) != len(dataset.corpus):  # Anserini skips empty documents; a repeated id is indexed twice
        log.warning("%s holds %d documents, %s's corpus %d: every id is the corpus's, but the counts differ",
                    index_dir, len(docids), dataset.name, len(dataset.corpus))
    log.info("%s is a stock index (no meta.json), so its corpus fingerprint cannot be checked; its %d document ids "
             "are exactly those of %s's corpus", index_dir, len(docids), dataset.name)


def run(args) -> None:
    """``bm25aug index`` without ``--to`` (``bm25aug.search.index_command`` checked its flags):
    build (or find up to date) each flavor's index of a dataset; print sizes."""
    dataset = load_dataset(args.dataset, args.data_dir)
    for flavor in args.flavor:
        path = ensure_index(dataset, flavor, args.index_root, threads=args.threads, force=args.force)
        size = index_size(path)
        vectors = f", of which document vectors {size['docvectors'] / 1e6:.1f} MB" if size["docvectors"] else ""
        print(f"{flavor}: {path} ({size['total'] / 1e6:.1f} MB{vectors})")
