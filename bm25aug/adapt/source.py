"""What ``bm25aug adapt`` reads: a dataset name, a corpus file, or a stock Lucene index with its
documents stored, each as a ``Source``: a name, documents by id, and the flat index the model
will serve (built when missing, as ``bm25aug index`` builds it; a stock index is searched as it is)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from bm25aug.data.corpus import Document
from bm25aug.data.registry import Dataset, load_dataset
from bm25aug.errors import UserError
from bm25aug.locations import CLUSTER, index_location, url_scheme

# A corpus file's layout, by its name: BEIR's JSONL, DPR's passages, MS MARCO's collection.
_GENERIC_STEMS = {"corpus", "passages", "psgs_w100", "collection"}


@dataclass
class Source:
    name: str
    corpus: Mapping[str, Document]
    index: Path
    path: Path  # the dataset folder, corpus file or index read (the run records it)


class FileDataset(Dataset):
    """A dataset made of one corpus file, whatever its name (no queries, no splits)."""

    def __init__(self, name: str, file: Path, layout: str):
        self._file = file
        super().__init__(name, file.parent, layout)

    @property
    def corpus_file(self) -> Path:
        return self._file


def file_layout(file: Path) -> str:
    """``beir`` for JSONL, else ``dpr`` (id, text, title) or ``msmarco`` (id, text) by the first line's fields."""
    if file.suffix == ".jsonl":
        return "beir"
    if file.suffix != ".tsv":
        raise UserError(f"--corpus {file}: not a corpus file bm25aug reads; fix: pass a BEIR corpus.jsonl, a DPR "
                        f"passages.tsv (id, text, title) or an MS MARCO collection.tsv (id, text)")
    with open(file, encoding="utf-8", errors="replace") as f:
        first = next(csv.reader([f.readline()], delimiter="\t"), [])
    if len(first) == 2:
        return "msmarco"
    if len(first) >= 3:
        return "dpr"
    raise UserError(f"--corpus {file}: its first line has {len(first)} tab-separated field(s); fix: write id<TAB>text "
                    f"(MS MARCO) or id<TAB>text<TAB>title (DPR) per line")


class IndexCorpus(Mapping):
    """A stock index's stored documents by id (``contents`` of Anserini's stored raw JSON, else the raw text)."""

    def __init__(self, index):
        from bm25aug.lucene.docids import stored_values
        from bm25aug.bm25_defaults import RAW_FIELD

        self.index, self._stored = index, (lambda numbers: stored_values(index.reader, numbers, RAW_FIELD))
        if index.num_docs and self._stored([0])[0] is None:
            raise UserError(f"{index.path} stores no document contents (Anserini's -storeRaw), so adapt has nothing to "
                            f"make queries from; fix: rebuild it with -storeRaw, or pass --dataset/--corpus")

    def __len__(self) -> int:
        return self.index.num_docs

    def __iter__(self) -> Iterator[str]:
        return iter(str(d) for d in self.index.docids)

    def __getitem__(self, docid: str) -> Document:
        number = int(self.index.doc_numbers([docid])[0])
        if number < 0:
            raise KeyError(docid)
        return _document(self._stored([number])[0])

    def items(self):
        for at in range(0, self.index.num_docs, 1024):
            numbers = range(at, min(at + 1024, self.index.num_docs))
            for n, raw in zip(numbers, self._stored(numbers)):
                yield str(self.index.docids[n]), _document(raw)


def _document(raw: str | None) -> Document:
    try:
        doc = json.loads(raw or "")
    except ValueError:
        return Document("", raw or "")
    if isinstance(doc, dict):
        return Document(str(doc.get("title", "") or ""), str(doc.get("contents", doc.get("text", "")) or ""))
    return Document("", raw or "")


def corpus_dataset(file: Path) -> Dataset:
    """A corpus file as a dataset, named after its folder (or file) and its fingerprint, so that its
    index never replaces that of a dataset, or of another corpus file, with the same name (an index
    whose corpus changed is rebuilt: ``ensure_index``)."""
    from bm25aug.data.registry import corpus_fingerprint

    name = (file.parent.name if file.stem in _GENERIC_STEMS else file.stem) or "corpus"
    layout = file_layout(file)
    return FileDataset(f"{name}-{corpus_fingerprint(FileDataset(name, file, layout))[:10]}", file, layout)


def resolve(dataset: str | None, corpus: str | None, index: str | None, data_dir: str | None = None,
            index_root: str | None = None, threads: int | None = None) -> Source:
    """The one corpus named (exactly one of ``dataset``, ``corpus``, ``index``) and its flat index."""
    given = [flag for flag, v in (("--dataset", dataset), ("--corpus", corpus), ("--index", index)) if v]
    if len(given) != 1:
        raise UserError(f"adapt reads one corpus, and {'none' if not given else ' and '.join(given)} was given; fix: "
                        f"pass exactly one of --dataset NAME, --corpus FILE, --index DIR")
    if index and index_location(index) == CLUSTER:  # the URL itself is not echoed: it may hold credentials
        raise UserError(f"adapt --index takes an index folder, and {url_scheme(index)} is a URL: adapt reads "
                        f"each document's terms from Lucene's files, which a cluster does not lend; fix: pass the "
                        f"corpus (--dataset NAME or --corpus FILE), then serve the adapted model against the cluster "
                        f"with --index URL")
    if index:
        from bm25aug.lucene.index import IndexMeta
        from bm25aug.lucene.reader import LuceneIndex

        meta = IndexMeta.load(index, flavor="flat")
        if meta.flavor != "flat":
            raise UserError(f"--index {index} is a {meta.flavor} index, and adapt fits a model for a flat one; fix: "
                            f"pass a flat index (Lucene's English analyzer, as Pyserini's BEIR and MS MARCO ones)")
        opened = LuceneIndex(index)
        from bm25aug.lucene.doc_terms import DocTermReader

        if not DocTermReader(opened, pretokenized=False).has_vectors:  # training reads each document's terms
            raise UserError(f"--index {index} stores no document vectors, which adapt reads each document's terms "
                            f"from; fix: rebuild it with Anserini's -storeDocvectors (and -storeRaw), or pass "
                            f"--dataset/--corpus")
        return Source(Path(index).name.removesuffix(".flat"), IndexCorpus(opened), Path(index), Path(index))
    from bm25aug.lucene.index import ensure_index

    if corpus:
        file = Path(corpus)
        if not file.is_file():
            raise UserError(f"--corpus {corpus} is not a file; fix: pass a corpus.jsonl, passages.tsv or "
                            f"collection.tsv")
        ds: Dataset = corpus_dataset(file)
    else:
        ds = load_dataset(dataset, data_dir)
    return Source(ds.name, ds.corpus, ensure_index(ds, "flat", index_root, threads=threads), ds.path)
