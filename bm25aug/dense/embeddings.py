"""The dense index: every document of a Lucene index encoded by a dense model, made once per corpus
and model and kept in the cache (``~/.cache/bm25aug/dense/<key>/``).

The key is the corpus (the corpus fingerprint and flavor of the index's ``meta.json``; a stock
index without one: its commit), the model's ``digest`` and ``RECIPE``, never the index build: a
rebuilt index of the same corpus (a fresh clone's CI) reuses the embeddings. They are stored in
external-id order, which no build changes, and handed out in the index's Lucene doc-number order,
so dense rows and BM25 hits share ids. ``dense.json`` records the corpus, the model, the id table's
digest (checked on every load) and the seconds the encoding took; evaluation reports that cost.

Documents are the index's stored ``contents`` (title and text, what BM25 searched). Encoding
writes each finished chunk of ``CHUNK_DOCS`` documents atomically into ``<key>.partial/``, so an
interrupted encoding continues from its last chunk; the finished embeddings appear in one rename.
Two processes never encode the same key at once (a lock; the second reuses the first's).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
from filelock import FileLock

from bm25aug.dense.models import DenseModel
from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, atomic_dir, atomic_open, derived_ok, digest, record_derived, source_key, write_json
from bm25aug.progress import progress

log = logging.getLogger(__name__)
DENSE = "dense"  # the embeddings' place under CACHE_ROOT
CHUNK_DOCS = 256  # documents a resumable chunk holds
RECIPE = "stored contents, external-id order, float32"
EMBEDDINGS, INFO, PLAN = "embeddings.npy", "dense.json", "plan.json"


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


def corpus_embeddings(index, model: DenseModel, chunk: int = CHUNK_DOCS) -> tuple[np.ndarray, float]:
    """The unit vector of every document of ``index`` (a ``LuceneIndex``), one row per Lucene doc
    number, and the seconds their encoding took: from the cache when this corpus was encoded by
    this model before, else encoded now (resuming an interrupted encoding)."""
    corpus = corpus_identity(index)
    key = source_key(DENSE, RECIPE, corpus, model.digest)
    folder = CACHE_ROOT / DENSE / key
    expected = {"recipe": RECIPE, "corpus": corpus, "model": model.name, "model_digest": model.digest,
                "documents": int(index.num_docs), "ids_digest": digest("\n".join(map(str, index.docids[index.by_id]))
                                                                         .encode())}
    found = _reuse(folder, key, expected)
    if found is None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder.parent / f".{key}.lock")):
            found = _reuse(folder, key, expected) or _encode(index, model, folder, key, expected, chunk)
    vectors, seconds = found
    return vectors[index.id_rank], seconds


def _reuse(folder: Path, key: str, expected: dict) -> tuple[np.ndarray, float] | None:
    """The cached vectors (external-id order) and their seconds, when made for ``expected``."""
    if not derived_ok(folder / EMBEDDINGS, key):
        return None
    try:
        info = json.loads((folder / INFO).read_text(encoding="utf-8"))
        if {k: info.get(k) for k in expected} != expected:
            log.info("%s was made for another corpus, id table or model; encoding again", folder)
            return None
        vectors = np.load(folder / EMBEDDINGS)
    except (OSError, ValueError, AttributeError):
        log.warning("%s is unreadable; encoding again", folder)
        return None
    if vectors.shape != (expected["documents"], info.get("dim")):
        return None
    return vectors, float(info["seconds"])


def _encode(index, model: DenseModel, folder: Path, key: str, expected: dict, chunk: int) -> tuple[np.ndarray, float]:
    """Encode every document, chunk by chunk into ``<key>.partial/`` (kept chunks are reused),
    then write the embeddings in one rename and drop the chunks."""
    partial = _partial(folder.with_name(f"{key}.partial"), {**expected, "chunk": chunk})
    n, parts, seconds = expected["documents"], [], 0.0
    log.info("encoding the %d documents of %s with %s (once per corpus and model; cached in %s)", n, index.path,
             model.name, folder)
    starts = range(0, n, chunk)
    done = [at for at in starts if (partial / _chunk_name(at)).is_file()]
    with progress(total=n, initial=min(n, len(done) * chunk), desc=f"dense: encode corpus ({model.name})",
                  unit="doc") as bar:
        for at in starts:
            rows = index.by_id[at:at + chunk]
            kept = _load_chunk(partial / _chunk_name(at), len(rows), model.dim)
            if kept is None:
                start = time.perf_counter()
                vectors = model.encode_documents([contents_text(raw) for raw in index.stored(rows.tolist())])
                kept = (np.asarray(vectors, np.float32), time.perf_counter() - start)
                with atomic_open(partial / _chunk_name(at)) as f:
                    np.savez(f, vectors=kept[0], seconds=kept[1])
                bar.update(len(rows))
            parts.append(kept[0])
            seconds += kept[1]
    embeddings = np.concatenate(parts) if parts else np.zeros((0, model.dim), np.float32)
    with atomic_dir(folder, (INFO, f"{EMBEDDINGS}.source.json"), what="a dense embedding cache") as tmp:
        np.save(tmp / EMBEDDINGS, embeddings)
        write_json(tmp / INFO, {**expected, "dim": int(model.dim), "seconds": seconds,
                                "docs_per_s": round(n / seconds, 2) if seconds else None})
        record_derived(tmp / EMBEDDINGS, key)
    shutil.rmtree(partial, ignore_errors=True)
    return embeddings, seconds


def _chunk_name(at: int) -> str:
    return f"chunk-{at:09d}.npz"


def _partial(path: Path, plan: dict) -> Path:
    """The chunks' folder for ``plan``: chunks of another plan (corpus, model, chunk size) are
    dropped; a folder bm25aug did not make (no plan.json) is refused."""
    if path.is_dir():
        try:
            same = json.loads((path / PLAN).read_text(encoding="utf-8")) == plan
        except (OSError, ValueError):
            same = False
        if not same:
            if not (path / PLAN).is_file() and any(path.iterdir()):
                raise UserError(f"{path} holds files bm25aug did not write (no {PLAN}); fix: move it away")
            shutil.rmtree(path)
    if not path.is_dir():
        path.mkdir(parents=True)
        write_json(path / PLAN, plan)
    return path


def _load_chunk(path: Path, rows: int, dim: int) -> tuple[np.ndarray, float] | None:
    """A finished chunk's vectors and seconds; None when absent or unreadable (encoded again)."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as saved:
            vectors, seconds = saved["vectors"], float(saved["seconds"])
    except (OSError, ValueError, KeyError):
        log.warning("%s is unreadable; encoding that chunk again", path)
        return None
    return (vectors, seconds) if vectors.shape == (rows, dim) else None


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
