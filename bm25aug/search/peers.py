"""Query-expansion peers: Pyserini's own RM3 and Rocchio on the flat index, as eval methods.

They run through Pyserini's ``LuceneSearcher`` with its default parameters (RM3: 10 feedback
terms from 10 documents, original query weight 0.5; Rocchio: α 1, β 0.75, 10 terms from the top
10 documents), BM25 k1/b as given, so their rows are what a Pyserini user gets. Both read stored
document vectors, which bm25aug's flat indexes keep (``-storeDocvectors``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bm25aug.errors import UserError
from bm25aug.progress import progress
from bm25aug.lucene.index import IndexMeta
from bm25aug.lucene.jvm import JNI_LOCK, start_jvm
from bm25aug.limits import check, check_query
from bm25aug.ranking import EMPTY, TopK
from bm25aug.bm25_defaults import B, K1
from bm25aug.lucene.reader import read_docids
from bm25aug.search.hits import Searches, to_hits
from bm25aug.search.indexes import folder_only

EXPANSIONS = ("rm3", "rocchio")


class ExpansionSearcher(Searches):
    """``search_arrays``/``hits`` like ``BM25Searcher``, over Pyserini's searcher with RM3 or Rocchio."""

    def __init__(self, index_dir: str | Path, expansion: str, k1: float = K1, b: float = B):
        if expansion not in EXPANSIONS:
            raise UserError(f"unknown expansion {expansion!r}; fix: use one of {', '.join(EXPANSIONS)}")
        self.index_dir = folder_only(index_dir, f"bm25-{expansion}", "stored document vectors, read by Pyserini")
        meta = IndexMeta.load(self.index_dir, flavor="flat")  # not a Lucene index: one error line, before Java's
        if meta.flavor != "flat":
            raise UserError(f"{index_dir} is a {meta.flavor} index; {expansion} analyzes queries with the English "
                            f"analyzer, for flat indexes; fix: pass the dataset's flat index")
        start_jvm()  # before Pyserini, whose own JVM setup fails on this runtime
        from pyserini.search.lucene import LuceneSearcher

        with JNI_LOCK:
            self.searcher = LuceneSearcher(str(self.index_dir))
            self.searcher.set_bm25(float(check("k1", k1)), float(check("b", b)))
            if not self.searcher.object.reader.getTermVectors(0):
                raise UserError(f"{index_dir} has no stored document vectors, which {expansion} reads; fix: rebuild "
                                f"it with -storeDocvectors (bm25aug's flat indexes have them: `bm25aug index "
                                f"--dataset NAME --flavor flat`)")
            if expansion == "rm3":
                self.searcher.set_rm3()
            else:
                self.searcher.set_rocchio()
            self.docids = read_docids(self.index_dir, self.searcher.object.reader)

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        check("k", k)
        if not check_query(query).strip():
            return EMPTY
        with JNI_LOCK:  # pyjnius objects are not safe to share between threads (bm25aug.lucene.reader)
            hits = self.searcher.search(query, k)
            ids = np.asarray([h.lucene_docid for h in hits], np.int64)
            scores = np.asarray([h.score for h in hits], np.float32)
        return TopK(ids, scores)

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]:
        """Query by query: Pyserini's expansion runs in Python objects that share pyjnius methods,
        so it holds ``JNI_LOCK`` throughout and threads would only queue (``threads`` is ignored)."""
        return [self.search_arrays(q, k) for q in progress(queries, desc=desc, unit="q", disable=desc is None)]

    def verify(self, dataset) -> None:
        """That the index holds ``dataset``'s very corpus (``bm25aug.lucene.index.verify_index``)."""
        from bm25aug.lucene.index import verify_index

        verify_index(self.index_dir, dataset, self.docids)

    def hits(self, top: TopK):
        return to_hits(self.docids, top)
