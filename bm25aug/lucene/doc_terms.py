"""What training and diagnostics read from a Lucene index, on demand: term statistics for every
term, and the terms of only those documents they touch.

Reading every posting costs about 3.3 µs each through pyjnius (two hours and more RAM than a
machine has for NQ's 2×10⁹ WordPiece postings), so nothing here walks the postings:

* **term dictionary**: each term with its document frequency (vocabulary-sized work);
* **field statistics**: ``docCount`` and ``sumTotalTermFreq``, which make Lucene's avgdl;
* **norms**: the one-byte document length ``BM25Similarity`` scores with;
* **a document's terms**: from its stored term vector (flat indexes, built with document vectors),
  else from its stored raw text (wp indexes are pre-tokenized: the whitespace split *is* the
  analysis), read per document. ``DocTermReader.reads`` counts them, so tests can show that
  training reads O(training documents), not O(corpus).
"""

from __future__ import annotations

import json

import numpy as np

from bm25aug.errors import UserError
from bm25aug.lucene.jvm import JNI_LOCK, jclass
from bm25aug.bm25_defaults import FIELD
from bm25aug.lucene.reader import LuceneIndex

RAW_FIELD = "raw"


def term_dictionary(index: LuceneIndex, field: str = FIELD) -> tuple[list[str], np.ndarray]:
    """Every term of ``field`` in index order (byte order), with its document frequency."""
    from jnius import cast  # after the JVM started (LuceneIndex did)

    terms, dfs = [], []
    with JNI_LOCK:
        reader = cast("org.apache.lucene.index.IndexReader", index.reader)  # the overload pyjnius must pick
        field_terms = jclass("org.apache.lucene.index.MultiTerms").getTerms(reader, field)
        if field_terms is not None:
            it = field_terms.iterator()
            while (ref := it.next()) is not None:
                terms.append(ref.utf8ToString())
                dfs.append(it.docFreq())
    return terms, np.asarray(dfs, np.int64)


def field_statistics(index: LuceneIndex, field: str = FIELD) -> tuple[int, int]:
    """``(docCount, sumTotalTermFreq)`` of ``field``: Lucene's N for idf, and avgdl's numerator."""
    with JNI_LOCK:
        stats = index.searcher.collectionStatistics(field)
        return (int(stats.docCount()), int(stats.sumTotalTermFreq())) if stats is not None else (0, 0)


class DocTermReader:
    """Terms, frequencies and norm bytes of single documents (Lucene doc numbers)."""

    def __init__(self, index: LuceneIndex, pretokenized: bool, field: str = FIELD):
        """``pretokenized``: the index was built from whitespace-separated tokens (wp), so its
        stored raw contents split on whitespace are its terms."""
        self.index, self.field, self.pretokenized = index, field, pretokenized
        self.reads = 0  # documents read so far
        from jnius import cast  # after the JVM started (LuceneIndex did)

        with JNI_LOCK:
            self.term_vectors = index.reader.termVectors()
            self.stored = index.reader.storedFields()
            self.leaves = index.reader.leaves()
            self.starts = [int(self.leaves.get(i).docBase) for i in range(self.leaves.size())]
            infos = jclass("org.apache.lucene.index.FieldInfos").getMergedFieldInfos(
                cast("org.apache.lucene.index.IndexReader", index.reader)).fieldInfo(field)
            self.has_vectors = infos is not None and bool(infos.hasVectors())  # the field's, not one document's

    @property
    def readable(self) -> bool:
        """Whether documents' terms can be read back: stored vectors, or a wp index's raw text (a
        stock index may have neither; searching it needs neither)."""
        if self.has_vectors:
            return True
        if not self.pretokenized or not self.index.num_docs:
            return False
        with JNI_LOCK:
            return self.stored.document(0).get(RAW_FIELD) is not None

    def terms(self, doc: int) -> dict[str, int]:
        """``{term: frequency}`` of one document, as the index stores it."""
        self.reads += 1
        if self.has_vectors:
            out = {}
            with JNI_LOCK:
                vectors = self.term_vectors.get(int(doc), self.field)
                if vectors is None:
                    return out
                it = vectors.iterator()
                while (ref := it.next()) is not None:
                    out[ref.utf8ToString()] = int(it.totalTermFreq())
            return out
        raw = None
        if self.pretokenized:
            with JNI_LOCK:
                raw = self.stored.document(int(doc)).get(RAW_FIELD)
        if raw is None:
            # An analyzed index without term vectors: only they replay its analysis exactly.
            raise UserError(f"{self.index.path} stores no document vectors "
                            f"{'nor raw documents ' if self.pretokenized else ''}to read a document's terms back "
                            f"from; fix: for a bm25aug index rebuild it (`bm25aug index --dataset NAME --force`); "
                            f"a stock index needs Anserini's -storeDocvectors (or search the dataset's own index)")
        out: dict[str, int] = {}
        for token in _raw_contents(raw).split():
            out[token] = out.get(token, 0) + 1
        return out

    def norm_bytes(self, docs: np.ndarray) -> np.ndarray:
        """The unsigned one-byte norm of each document (0 where the field is missing)."""
        out = np.zeros(len(docs), np.int64)
        order = np.argsort(docs, kind="stable")
        leaf, values = -1, None
        with JNI_LOCK:
            for i in order.tolist():  # ascending: a NumericDocValues iterator only moves forward
                doc = int(docs[i])
                at = int(np.searchsorted(self.starts, doc, side="right")) - 1
                if at != leaf:
                    leaf, values = at, self.leaves.get(at).reader().getNormValues(self.field)
                if values is not None and values.advanceExact(doc - self.starts[at]):
                    out[i] = int(values.longValue()) & 0xFF
        return out


def _raw_contents(raw: str) -> str:
    """The ``contents`` of a stored raw JSON document (Anserini's JsonCollection), else the raw text."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    return parsed.get("contents", raw) if isinstance(parsed, dict) else raw
