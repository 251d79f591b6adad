"""Finding and opening an index, whatever holds it: ``locate_index`` and ``open_index``.

What a location names is decided once, by ``bm25aug.locations.index_location``; this module is
the only one that acts on the answer. Every command (``search``, ``eval``), the server and
``BM25Searcher`` come here, and get an ``Index`` (``bm25aug.backend``): a ``LuceneIndex`` over a
folder, or an ``OpenSearchIndex`` on a cluster. A new backend is a new kind of location there and
one more branch of ``open_index`` here, both backends imported only when used.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import NamedTuple

from bm25aug.backend import Index
from bm25aug.bm25_defaults import MULTIFIELD_WEIGHTS
from bm25aug.errors import UserError
from bm25aug.locations import CLUSTER, FOLDER, index_location


class OpenIndex(NamedTuple):
    """An opened index, what it is (``meta``: ``bm25aug.lucene.index.IndexMeta``), the WordPiece
    tokenizer a wp index is searched with (None otherwise), and how messages name it."""

    index: Index
    meta: object
    tokenizer: object
    where: Path | str


def locate_index(name_or_path: str | Path) -> Path | str:
    """A cluster's URL as given, an index folder as given, else a Pyserini prebuilt index name, found
    through Pyserini's own ``download_prebuilt_index``: from its cache (``~/.cache/pyserini/indexes``,
    or ``$PYSERINI_CACHE``) when there, else downloaded where the network allows."""
    kind = index_location(name_or_path)
    if kind == CLUSTER:  # an OpenSearch index (bm25aug.opensearch), searched where it is
        return name_or_path
    if kind == FOLDER:
        return Path(name_or_path)
    from bm25aug.lucene.jvm import start_jvm

    start_jvm()  # before Pyserini, whose own JVM set-up fails on this runtime
    from pyserini.util import download_prebuilt_index

    try:
        with contextlib.redirect_stdout(sys.stderr):  # Pyserini prints its download attempts; stdout may be a run
            return Path(download_prebuilt_index(name_or_path, verbose=False))
    except ValueError as e:
        if str(e).startswith("Unrecognized index name"):
            raise UserError(f"--index {name_or_path!r} is neither a folder nor a Pyserini prebuilt index name; "
                            f"fix: pass an index folder, or a name such as beir-v1.0.0-scifact.flat") from None
        failure = e
    except Exception as e:  # noqa: BLE001  (a download fails many ways: md5 assertion, tar, HTTP, OS)
        failure = e
    raise UserError(f"prebuilt index {name_or_path!r} is not in Pyserini's cache and could not be downloaded "
                    f"({type(failure).__name__}: {str(failure)[:120]}); fix: download it where the network allows, "
                    f"or pass an index folder")


def local_folder(location: str | Path) -> Path | None:
    """The folder on this machine that ``location`` (as ``locate_index`` gives it) is, None for a
    cluster's index: what the output checks guard and the index checks read."""
    return None if index_location(location) == CLUSTER else Path(location)


def open_index(location, k1: float, b: float, tokenizer=None, flavor: str | None = None,
               fields: dict[str, float] | None = None) -> OpenIndex:
    """The index at ``location`` (a folder, a cluster's URL, or an ``OpenSearchIndex`` opened on
    the user's own client) with BM25's ``k1`` and ``b``, checked
    to be ``flavor`` when given; ``tokenizer`` (a name, a path or a tokenizer): the WordPiece
    vocabulary a stock wp index was built with; ``fields``: a multifield index's field weights."""
    if not isinstance(location, (str, Path)):  # opened already, e.g. on the user's own opensearch-py client
        from bm25aug.opensearch.index import OpenSearchIndex

        if not isinstance(location, OpenSearchIndex):
            raise UserError(f"an index is a folder, a Pyserini prebuilt name, a cluster's URL or an OpenSearchIndex, "
                            f"not a {type(location).__name__}; fix: pass one of those")
        index = open_cluster_index(location, k1, b, tokenizer, flavor, fields)
        return OpenIndex(index, index.meta, None, index.path)
    if index_location(location) == CLUSTER:
        index = open_cluster_index(location, k1, b, tokenizer, flavor, fields)
        return OpenIndex(index, index.meta, None, str(location))
    return _open_folder(Path(location), k1, b, tokenizer, flavor, fields)


def open_cluster_index(location, k1: float, b: float, tokenizer, flavor: str | None, fields):
    """An OpenSearch index (a URL, or an ``OpenSearchIndex`` opened already), checked as
    ``bm25aug.opensearch.index.open_cluster`` checks it."""
    from bm25aug.opensearch.index import open_cluster

    return open_cluster(location, k1, b, tokenizer, flavor, fields)


def _open_folder(folder: Path, k1: float, b: float, tokenizer, flavor: str | None,
                 fields: dict[str, float] | None) -> OpenIndex:
    from bm25aug.lucene.index import IndexMeta, check_vocab
    from bm25aug.lucene.reader import LuceneIndex
    from bm25aug.tokenization import load_tokenizer

    tokenizer = load_tokenizer(tokenizer) if isinstance(tokenizer, (str, Path)) else tokenizer
    meta = IndexMeta.load(folder, tokenizer, flavor)
    if flavor and meta.flavor != flavor:  # bm25aug's own index: its meta.json says what it is
        raise UserError(f"{folder} is a {meta.flavor} index, not {flavor}; fix: pass a {flavor} index "
                        f"(`bm25aug index --flavor {flavor}`), or the method or model for {meta.flavor}")
    multifield = meta.flavor == "multifield"
    index = LuceneIndex(folder, k1, b, fields=field_weights(
        meta, MULTIFIELD_WEIGHTS if multifield and fields is None else fields, folder))
    if meta.flavor != "wp":
        return OpenIndex(index, meta, None, folder)
    tokenizer = tokenizer or load_tokenizer()
    check_vocab(meta, tokenizer, folder)
    return OpenIndex(index, meta, tokenizer, folder)


def field_weights(meta, fields: dict[str, float] | None, where: Path | str) -> dict[str, float] | None:
    """``fields`` checked for an index (``meta``): weights of a multifield index's two fields; any
    for a one-field index is an error, never ignored."""
    from bm25aug.lucene.reader import check_fields

    if fields is not None and meta.flavor != "multifield":
        raise UserError(f"field weights {fields!r} were given for {where}, a {meta.flavor} index with "
                        f"one field; fix: drop them, or pass a multifield index")
    if fields is not None and not set(fields) <= MULTIFIELD_WEIGHTS.keys():
        raise UserError(f"field weights {fields!r} name fields a multifield index does not have; fix: weigh "
                        f"{' and '.join(MULTIFIELD_WEIGHTS)}")
    return check_fields(fields)


def folder_only(location: str | Path, what: str, needs: str) -> Path:
    """``location`` as the index folder ``what`` needs (it reads ``needs``, which only a folder
    holds); a cluster's index is refused in one line, before anything is opened."""
    if index_location(location) == CLUSTER:  # the URL is not echoed: messages name a cluster by what it is
        raise UserError(f"{what} reads what only an index folder holds ({needs}), and this index is on a cluster; "
                        f"fix: pass the dataset's index folder as --index, or search the cluster with bm25-flat or a "
                        f"model (augmented)")
    return Path(location)
