"""What the peers that encode every document share (the dense peer's ``bm25aug.dense.embeddings``,
the SPLADE peer's ``bm25aug.dense.sparse_embeddings``): a corpus's vectors made once per corpus and
model and kept in the cache (``<cache>/<space>/<key>/``), resumably.

The key is the corpus (``corpus_identity``: the corpus fingerprint and flavor of the index's
``meta.json``; a stock index without one: its commit), the model's ``digest`` and the store's
``recipe``, never the index build: a rebuilt index of the same corpus (a fresh clone's CI) reuses
the vectors. They are stored in external-id order, which no build changes, and handed out in the
index's Lucene doc-number order (``VectorStore.ordered``: the dense peer's a view that maps rows
through ``LuceneIndex.id_rank``, never a permuted copy), so rows and BM25 hits share ids. The
store's record (``info``)
holds the corpus, the model, the id table's digest (checked on every load) and the seconds the
encoding took; evaluation reports that cost.

Documents are the index's stored ``contents`` (title and text, what BM25 searched). Encoding
writes each finished chunk of documents atomically into ``<key>.partial/``, so an interrupted
encoding continues from its last chunk; the finished vectors are then written from the chunks, one
chunk in memory at a time (``VectorStore.write``: the dense peer streams them into one ``.npy``
file, so memory does not grow with the corpus), and appear in one rename. Two processes
never encode the same key at once (a lock; the second reuses the first's). How a peer's vectors
are kept, chunk and whole, is its ``VectorStore``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import IO, Any, Iterator, Protocol

import numpy as np
from filelock import FileLock

from bm25aug.dense.models import Encoder
from bm25aug.errors import UserError
from bm25aug.io import atomic_dir, atomic_open, derived_ok, open_regular, record_derived, source_key, write_json
from bm25aug.progress import progress

log = logging.getLogger(__name__)
PLAN = "plan.json"
CHUNK_DOCS = 256  # documents a resumable chunk holds, both peers' default
IDS_BLOCK = 4096  # external ids hashed at a time (the id table's digest)


class VectorStore(Protocol):
    """How one peer keeps a corpus's vectors: its place and recipe, a chunk's and the whole's files."""

    space: str  # the vectors' place under the cache root, and the key's namespace
    recipe: str
    vectors_file: str
    info_file: str
    what: str  # the finished folder, as an error names it

    def plan(self, model: Encoder) -> dict:
        """What the record holds about ``model`` beyond the corpus, the model and the id table."""

    def chunk(self, encoded) -> Any:
        """A chunk of ``model.encode_documents``'s output as the store keeps it."""

    def save_chunk(self, f: IO[bytes], vectors, seconds: float) -> None: ...

    def load_chunk(self, saved, rows: int, dim: int) -> Any | None:
        """A saved chunk's vectors (``saved``: its open ``np.load``), None when they do not fit."""

    def write(self, path: Path, parts: Iterator, rows: int, dim: int) -> Any:
        """Write the chunks ``parts`` (in order, ``rows`` in all) as the whole's file, holding one
        chunk at a time where the format allows; returns what ``summary`` reads."""

    def load(self, path: Path) -> Any: ...

    def ordered(self, vectors, index) -> Any:
        """``vectors`` (external-id order) as rows in ``index``'s Lucene doc-number order."""

    def fits(self, vectors, expected: dict, info: dict) -> bool:
        """Whether cached vectors are whole for the record ``expected`` (``info``: the one read)."""

    def summary(self, vectors, dim: int) -> dict:
        """What the record says of the finished vectors, beside the seconds."""


def corpus_identity(index) -> dict:
    """What the index's documents are, whichever build holds them: the corpus fingerprint and
    flavor from ``meta.json``; a stock index (no fingerprint) is known by its commit alone."""
    from bm25aug.lucene.index import META_FILE, IndexMeta

    if (index.path / META_FILE).is_file():
        meta = IndexMeta.load(index.path, probe=False)
        if meta.corpus_fingerprint:
            return {"corpus_fingerprint": meta.corpus_fingerprint, "flavor": meta.flavor}
    from bm25aug.lucene.reader import commit_key

    return {"index_commit": commit_key(index.path, index.reader)}


def cached_corpus(index, model: Encoder, store: VectorStore, root: Path, chunk: int) -> tuple[Any, float]:
    """The vector of every document of ``index`` (a ``LuceneIndex``) under ``model``, one row per
    Lucene doc number, and the seconds their encoding took: from ``root / store.space`` when this
    corpus was encoded by this model before, else encoded now (resuming an interrupted encoding)."""
    model = model.corpus_encoder  # a split model's corpus is its document export's (same vectors, same cache)
    corpus = corpus_identity(index)
    key = source_key(store.space, store.recipe, corpus, model.digest)
    folder = root / store.space / key
    expected = {"recipe": store.recipe, "corpus": corpus, "model": model.name, "model_digest": model.digest,
                "documents": int(index.num_docs), **store.plan(model),
                "ids_digest": ids_digest(index)}
    found = reuse(folder, key, expected, store)
    if found is None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder.parent / f".{key}.lock")):
            found = reuse(folder, key, expected, store) or encode(index, model, folder, key, expected, store, chunk)
    vectors, seconds = found
    return store.ordered(vectors, index), seconds


def ids_digest(index) -> str:
    """The digest of the external ids in sorted order, one a line (the bytes of the whole table
    joined by newlines), hashed ``IDS_BLOCK`` ids at a time."""
    h = hashlib.blake2b(digest_size=16)
    for at in range(0, int(index.num_docs), IDS_BLOCK):
        ids = index.docids[index.by_id[at:at + IDS_BLOCK]]
        h.update(("\n" if at else "").encode() + "\n".join(map(str, ids)).encode())
    return h.hexdigest()


def reuse(folder: Path, key: str, expected: dict, store: VectorStore) -> tuple[Any, float] | None:
    """The cached vectors (external-id order) and their seconds, when made for ``expected``."""
    if not derived_ok(folder / store.vectors_file, key):
        return None
    try:
        info = read_record(folder / store.info_file)
        if {k: info.get(k) for k in expected} != expected:
            log.info("%s was made for another corpus, id table or model; encoding again", folder)
            return None
        vectors = store.load(folder / store.vectors_file)
    except (OSError, ValueError, AttributeError):
        log.warning("%s is unreadable; encoding again", folder)
        return None
    if not store.fits(vectors, expected, info):
        return None
    return vectors, float(info["seconds"])


def encode(index, model: Encoder, folder: Path, key: str, expected: dict, store: VectorStore,
           chunk: int) -> tuple[Any, float]:
    """Encode every document, chunk by chunk into ``<key>.partial/`` (kept chunks are reused),
    then write the vectors from the chunks, one at a time, in one rename and drop the chunks."""
    partial = partial_folder(folder.with_name(f"{key}.partial"), {**expected, "chunk": chunk})
    n, seconds = expected["documents"], 0.0
    log.info("encoding the %d documents of %s with %s (once per corpus and model; cached in %s)", n, index.path,
             model.name, folder)
    starts = range(0, n, chunk)
    done = [at for at in starts if (partial / chunk_name(at)).is_file()]
    with progress(total=n, initial=min(n, len(done) * chunk), desc=f"{store.space}: encode corpus ({model.name})",
                  unit="doc") as bar:
        for at in starts:
            rows = index.by_id[at:at + chunk]
            kept = load_chunk(partial / chunk_name(at), len(rows), model.dim, store)
            if kept is None:
                start = time.perf_counter()
                vectors = model.encode_documents([contents_text(raw) for raw in index.stored(rows.tolist())])
                kept = (store.chunk(vectors), time.perf_counter() - start)
                with atomic_open(partial / chunk_name(at)) as f:
                    store.save_chunk(f, *kept)
                bar.update(len(rows))
            seconds += kept[1]
    with atomic_dir(folder, (store.info_file, f"{store.vectors_file}.source.json"), what=store.what) as tmp:
        whole = store.write(tmp / store.vectors_file, saved_chunks(partial, starts, n, model.dim, store), n,
                            model.dim)
        write_json(tmp / store.info_file, {**expected, **store.summary(whole, model.dim), "seconds": seconds,
                                           "docs_per_s": round(n / seconds, 2) if seconds else None})
        record_derived(tmp / store.vectors_file, key)
    shutil.rmtree(partial, ignore_errors=True)
    return store.load(folder / store.vectors_file), seconds


def saved_chunks(partial: Path, starts: range, n: int, dim: int, store: VectorStore) -> Iterator:
    """The finished chunks' vectors in order, read one at a time."""
    for at in starts:
        kept = load_chunk(partial / chunk_name(at), min(starts.step, n - at), dim, store)
        if kept is None:
            raise UserError(f"{partial / chunk_name(at)} changed while the vectors were written; fix: run again "
                            f"(that chunk is encoded again)")
        yield kept[0]


def chunk_name(at: int) -> str:
    return f"chunk-{at:09d}.npz"


def partial_folder(path: Path, plan: dict) -> Path:
    """The chunks' folder for ``plan``: chunks of another plan (corpus, model, chunk size) are
    dropped; a folder bm25aug did not make (no plan.json) is refused."""
    if path.is_dir():
        try:
            same = read_record(path / PLAN) == plan
        except (OSError, ValueError):
            same = False
        if not same:
            if not (path / PLAN).exists() and any(path.iterdir()):
                raise UserError(f"{path} holds files bm25aug did not write (no {PLAN}); fix: move it away")
            shutil.rmtree(path)
    if not path.is_dir():
        path.mkdir(parents=True)
        write_json(path / PLAN, plan)
    return path


def read_record(path: Path) -> Any:
    """A record of the cache read as JSON, only from a regular file: a FIFO or a device there is an
    ``OSError`` (unreadable, made again), never waited on."""
    with open_regular(path) as f:
        return json.load(f)


def load_chunk(path: Path, rows: int, dim: int, store: VectorStore) -> tuple[Any, float] | None:
    """A finished chunk's vectors and seconds; None when absent, unreadable or not this chunk's
    (encoded again)."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as saved:
            vectors, seconds = store.load_chunk(saved, rows, dim), float(saved["seconds"])
    except (OSError, ValueError, KeyError, IndexError):
        log.warning("%s is unreadable; encoding that chunk again", path)
        return None
    return None if vectors is None else (vectors, seconds)


def contents_text(raw: str | None) -> str:
    """The stored document's searchable text: ``contents`` (Anserini's JsonCollection), else a BEIR
    document's title and text (as a stock index may store them)."""
    if raw is None:
        return ""
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(doc, dict):
        return raw
    if "contents" in doc:
        return str(doc["contents"])
    return " ".join(str(doc.get(key) or "") for key in ("title", "text")).strip()
