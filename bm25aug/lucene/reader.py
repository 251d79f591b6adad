"""``LuceneIndex``, the ``Index`` (``bm25aug.backend``) of a folder: open it, build queries in
Java, get top-k back as arrays. The Java objects it searches with are ``bm25aug.lucene.opening``'s.

Pyserini's searcher loads a stored document and wraps a Java object for every hit, which costs
about 15x the search itself. Here the only per-query crossings into Java are building the query
(one string, parsed in Java), the search, and one byte array with every hit (a ``MethodHandle`` that runs the search and packs
its ScoreDocs in Java, so that no Java object per hit reaches Python). External ids come from a table read once per index.
Many queries go to Java as one task instead (``submit``, ``bm25aug.lucene.batch``). A multifield
index (``fields``) is searched on each field, each field's clauses boosted by its weight, as
Pyserini's ``search(..., fields=...)`` searches it. The id table is ``bm25aug.lucene.docids``'s.

Results equal Pyserini's exactly. Anserini searches with ties broken by the external id, rounds
each score to 4 decimals and then lowers the k-th of a run of equal rounded scores by k·1e-6 so
that every evaluation tool keeps its order (``ScoreTiesAdjusterReranker``); ``anserini_top`` and
``anserini_scores`` (``bm25aug.ranking``) do the same in numpy, in float32 as Java does, for a
whole batch at once.

Threads: pyjnius stores the target object on a method shared by all instances of a class, so two
threads calling the same method on different objects can swap targets (pyjnius #287, #563). Every
call here holds ``JNI_LOCK`` except the search, which goes through one ``MethodHandle`` per
process, and the bag-of-words query generator, one instance per process: their targets never change, so Lucene runs
without the lock (and without the GIL), and threads calling ``search`` at once each get their own hits.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from bm25aug.cache import DF_ENTRIES, LRU
from bm25aug.errors import UserError
from bm25aug.lucene.jvm import JNI_LOCK, jclass
from bm25aug.lucene.opening import java, open_reader, search_error
from bm25aug.limits import check
from bm25aug.lucene import term_query
from bm25aug.ranking import EMPTY, PAIRS, TIE_MARGIN, TopK, anserini_top
from bm25aug.bm25_defaults import B, FIELD, K1, MULTIFIELD_WEIGHTS, RAW_FIELD
from bm25aug.backend import ANALYZED, FIELD_TERMS, TERMS
# The id table lives in bm25aug.lucene.docids; its names are re-exported here for the callers that read them.
from bm25aug.lucene.docids import DOCIDS_FILE, ID_FIELD, commit_key, read_docids, stored_values  # noqa: F401



def check_fields(fields: dict[str, float] | None) -> dict[str, float] | None:
    """Field weights as a multifield search takes them: field names, each with a finite weight above 0."""
    if fields is None:
        return None
    if not isinstance(fields, dict) or not fields or not all(
            isinstance(f, str) and re.fullmatch(r"\w+", f) and isinstance(w, (int, float)) and not isinstance(w, bool)
            and math.isfinite(w) and 0 < w < 2**24 for f, w in fields.items()):
        raise UserError(f"field weights {fields!r} are not {{field: weight}} with weights above 0; fix: pass e.g. "
                        f"{MULTIFIELD_WEIGHTS} (Pyserini's multifield weights)")
    return {f: float(w) for f, w in fields.items()}


class LuceneIndex:
    """An open index with a BM25 ``IndexSearcher`` and its external-id table. ``fields``
    (``{field: weight}``): the fields every query searches, each field's clauses boosted by its
    weight (a multifield index); None: ``contents`` alone."""

    def __init__(self, path: str | Path, k1: float = K1, b: float = B, fields: dict[str, float] | None = None):
        self.path = Path(path)
        self.fields, self._jfields = check_fields(fields), None
        if not (self.path.is_dir() and any(self.path.glob("segments_*"))):
            raise UserError(f"{self.path} is not a Lucene index (no segments_* file); "
                            f"fix: build it with `bm25aug index --dataset NAME`")
        self.j = java()
        with JNI_LOCK:
            from jnius import cast

            self.reader = open_reader(self.path)
            self.searcher = jclass("org.apache.lucene.search.IndexSearcher")(
                cast("org.apache.lucene.index.IndexReader", self.reader))
            self.searcher.setSimilarity(self.j.BM25(float(check("k1", k1)), float(check("b", b))))
            self.num_docs = int(self.reader.maxDoc())
        self.docids = read_docids(self.path, self.reader)
        # Lucene doc numbers in external-id order: an order of the documents that does not depend on
        # how the index was built (a multi-threaded build numbers them differently each time).
        self.by_id = np.argsort(self.docids, kind="stable")  # unicode, or Python strings (bm25aug.lucene.docids)
        self._sorted_ids = self.docids[self.by_id]
        self.id_rank = np.empty(len(self.docids), np.int64)
        self.id_rank[self.by_id] = np.arange(len(self.docids))
        # bounded (bm25aug.cache.DF_ENTRIES): a model's vocabulary stays cached; a flood of new words cannot grow it
        self._df = LRU(DF_ENTRIES)
        self.batch_functions: dict[tuple[str, int], object] = {}  # bm25aug.lucene.batch.search_function

    def doc_freq(self, term: str, field: str = FIELD) -> int:
        """Documents that contain ``term`` (not analyzed), cached per term."""
        if (df := self._df.get((field, term))) is None:
            with JNI_LOCK:
                df = int(self.reader.docFreq(jclass("org.apache.lucene.index.Term")(field, term)))
            self._df.put((field, term), df)
        return df

    def doc_freqs(self, terms, field: str = FIELD) -> dict[str, int]:
        """``doc_freq`` of each term."""
        cached = self._df.get  # inline for the known terms: a model's term list checks each (indexed)
        return {t: df if (df := cached((field, t))) is not None else self.doc_freq(t, field) for t in terms}

    def stored(self, numbers: list[int]) -> list[str | None]:
        """The raw stored document (Anserini's ``raw`` field) of each Lucene doc number."""
        return stored_values(self.reader, numbers, RAW_FIELD)

    def close(self) -> None:
        with JNI_LOCK:
            self.reader.close()

    def verify(self, dataset) -> None:
        """That this index holds ``dataset``'s very corpus (``bm25aug.lucene.index.verify_index``)."""
        from bm25aug.lucene.index import verify_index

        verify_index(self.path, dataset, self.docids)

    def doc_numbers(self, ids: list[str]) -> np.ndarray:
        """Lucene doc number of each external id (-1 where no document has exactly that id), by
        binary search in the sorted id table: no dict over the whole corpus. Only a string equal to
        a stored id matches: numpy's fixed-width strings drop trailing NULs, so an id ending in NUL
        never matches such a table (whose ids hold none: ``bm25aug.lucene.docids.id_array``)."""
        ids = list(ids)
        if not ids or not len(self._sorted_ids):
            return np.full(len(ids), -1, np.int64)
        python = self._sorted_ids.dtype == object
        ok = np.fromiter((isinstance(i, str) and (python or not i.endswith("\x00")) for i in ids), bool, len(ids))
        keys = np.asarray([i if good else "" for i, good in zip(ids, ok)], dtype=object if python else str)
        at = np.minimum(np.searchsorted(self._sorted_ids, keys), len(self._sorted_ids) - 1)
        return np.where(ok & (self._sorted_ids[at] == keys), self.by_id[at], -1).astype(np.int64)

    # ---------------------------------------------------------------------------------- queries
    def weighted_query(self, terms: dict[str, float], fields: dict[str, float] | None = None):
        """The Java query of a checked weighted term list: one ``BoostQuery(TermQuery)`` per term
        with a positive weight, on each searched field (``bm25aug.lucene.term_query``); terms are
        not analyzed. None: no weight above 0, nothing to search."""
        item = self.terms_element(terms, fields)
        return None if item is None else term_query.build(item, FIELD)

    def terms_element(self, terms: dict[str, float], fields: dict[str, float] | None = None) -> list | None:
        """What the Java pool takes for ``terms`` on ``fields`` (default: this index's), searched as
        ``terms_kind(fields)``; None: nothing to search."""
        return term_query.element(terms, fields or self.fields)

    def terms_kind(self, fields: dict[str, float] | None = None) -> str:
        """The kind (``TERMS`` or ``FIELD_TERMS``) of ``terms_element(terms, fields)``."""
        return FIELD_TERMS if fields or self.fields else TERMS

    def analyzed_query(self, text: str):
        """Pyserini's default query: the English analyzer's terms, boosted by count, on ``contents``
        (on each of ``fields``, each boosted by its weight: Pyserini's ``search(..., fields=...)``).
        The generator is a process-wide singleton (its target never changes), so after the first
        call, which resolves the returned classes under the lock, it runs without the lock."""
        fields = self._java_fields()
        if not self.j.analyzed_warm.get(fields is None):
            with JNI_LOCK:
                query = self.j.bag_of_words.buildQuery(fields or FIELD, self.j.english, text)
                self.j.analyzed_warm[fields is None] = True
                return query
        return self.j.bag_of_words.buildQuery(fields or FIELD, self.j.english, text)

    def _java_fields(self):
        """``fields`` as the ``java.util.HashMap`` Pyserini hands its generator, made once (None: one field)."""
        if self.fields and self._jfields is None:
            with JNI_LOCK:
                jfields = jclass("java.util.HashMap")()
                for field, weight in self.fields.items():
                    jfields.put(field, jclass("java.lang.Float")(weight))
                self._jfields = jfields
        return self._jfields

    def query(self, kind: str, item):
        """The Java query of what the Java pool searches (``bm25aug.lucene.batch``): a query text
        (``ANALYZED``) or a term list's element (``TERMS``, ``FIELD_TERMS``)."""
        return self.analyzed_query(item) if kind == ANALYZED else term_query.build(item, FIELD)

    # ----------------------------------------------------------------------------------- search
    def raw_top(self, query, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Lucene's own top n by score (ties: lower Lucene doc first), unrounded, as arrays."""
        pairs = self._top(query, n)
        return pairs["doc"].astype(np.int64), pairs["score"].astype(np.float32)

    def raw_ranked(self, query, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top k in Anserini's order (score, then external id) with Lucene's own, unrounded
        scores: what Anserini's rerankers (RM3) read before its scores are rounded."""
        n = self.depth(k)
        pairs = self.deepen(query, self._top(query, n), n, k)
        docs, scores = pairs["doc"].astype(np.int64), pairs["score"].astype(np.float32)
        order = np.lexsort((self.id_rank[docs], -scores))[:k]
        return docs[order], scores[order]

    def _top(self, query, n: int) -> np.ndarray:
        # pyjnius passes the varargs of invokeWithArguments as separate arguments: no argument list to build.
        args = (self.searcher, query, self.j.integer(n))
        with JNI_LOCK:
            # The first call resolves the classes it returns; keep that under the lock too.
            pairs = None if self.j.search_warm else self._invoke(args)
            self.j.search_warm = True
        if pairs is None:
            pairs = self._invoke(args)
        # ByteArray.tostring() copies pyjnius's buffer in one go; bytes(pairs) iterates it element by element.
        return np.frombuffer(pairs.tostring(), dtype=PAIRS)

    def _invoke(self, args):
        """The packed search handle, a refused search as one error line (``search_error``)."""
        from jnius import JavaException

        try:
            return self.j.search.invokeWithArguments(*args)
        except JavaException as e:
            raise search_error(self.path, e) from None

    def depth(self, k: int) -> int:
        """How many hits to ask Lucene for so that a tie across the k-th place can be resolved
        by external id (never more than the index holds, so no depth overflows Java's int)."""
        return int(min(check("k", k) + TIE_MARGIN, self.num_docs))

    def complete(self, pairs: np.ndarray, n: int, k: int) -> bool:
        """Whether ``pairs`` (the top n) decides the top k: fewer hits than asked for, the k-th
        score above the last one, or the whole index."""
        return len(pairs) < n or len(pairs) <= k or pairs["score"][k - 1] > pairs["score"][-1] or n == self.num_docs

    def deepen(self, query, pairs: np.ndarray, n: int, k: int) -> np.ndarray:
        """Search again, deeper, until a tie across the k-th place is seen whole."""
        while not self.complete(pairs, n, k):
            n = min(n * 4, self.num_docs)
            pairs = self._top(query, n)
        return pairs

    def search(self, query, k: int) -> TopK:
        """Top k exactly as Anserini returns them (``anserini_top``)."""
        if not self.num_docs:
            check("k", k)
            return EMPTY
        n = self.depth(k)
        return anserini_top([self.deepen(query, self._top(query, n), n, k)], k, self.id_rank)[0]

    def submit(self, kind: str, texts: list, k: int, threads: int):
        """Start searching ``texts`` (query texts of ``kind``, none empty) on ``threads`` Java
        threads; ``result()`` waits and returns each one's ``TopK``, equal to ``search``'s."""
        from bm25aug.lucene.batch import PendingSearch

        if kind == ANALYZED and self.fields:  # the Java pool's analyzed queries search contents alone
            raise ValueError("a multifield index is searched in batches with term lists' elements (terms_element)")
        check("k", k)
        check("threads", threads)
        return PendingSearch(self, kind, texts, k, threads)
