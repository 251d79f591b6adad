"""Many queries on a Java thread pool, with no Java source to compile and no Python object per hit.

A batch is one Java task, ``texts.parallelStream().map(search).toArray()`` run inside a
``ForkJoinPool`` of ``threads`` workers (a parallel stream forks into the pool it runs in).
``search`` is a ``java.util.function.Function`` that ``MethodHandleProxies`` makes from
``java.lang.invoke`` handles: build the query, search, and pack the hits into one ``byte[]``
(``bm25aug.lucene.opening._search_handle``). Three kinds of item (``bm25aug.backend.ANALYZED``,
``TERMS``, ``FIELD_TERMS``): a query text for Anserini's bag of words on the
English analyzer (what Pyserini's bm25-flat does), or a weighted term list's arrays, built into
boosted term clauses on ``contents`` or on each of its fields (``bm25aug.lucene.term_query``).

So Python crosses into Java a handful of times per batch, whatever its size, and Lucene's work on
every thread runs without the GIL: Python may encode the next chunk meanwhile. Python waits by
polling (``isDone`` under ``JNI_LOCK``, then a sleep without it), so another thread's Java calls
never wait for a whole batch, and a Ctrl-C interrupts the sleep at once. The sleep grows with the
batch's age, from 0.5 ms to 2 ms (an eighth of the age): each wake-up costs CPU that, at two
threads, Lucene's threads need (``research/thread_cpu.py`` counts them), and the price is that a
batch may be seen done up to an eighth of its age, at most 2 ms, after it is (before: 0.5 ms;
a batch searching for under 4 ms, as the server's micro-batches mostly are, is seen as soon).
A batch searched through ``bm25aug.search.batch`` is one of its pieces (up to 64 queries); the
stream splits it into parts by the JVM's common-pool size (4 parts of 16 on 2 cores).

The ``Function`` is made once per index, kind and depth (``search_function``). A query whose k-th
place ties past the hits fetched is searched again deeper on a second pool, never one by one in
Python (``research/thread_cpu.py`` counts such queries).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from bm25aug.lucene.jvm import JNI_LOCK, jclass, process_wide
from bm25aug.ranking import EMPTY, PAIRS, TopK, anserini_top
from bm25aug.lucene import term_query
from bm25aug.backend import ANALYZED, FIELD_TERMS, TERMS
from bm25aug.bm25_defaults import FIELD
from bm25aug.lucene.opening import java, search_error

if TYPE_CHECKING:
    from bm25aug.lucene.reader import LuceneIndex

_POLL_S, _POLL_MAX_S = 0.0005, 0.002  # a waiting batch's shortest and longest sleep


class _Handles:
    """Process-wide handles and pools, made once (under ``JNI_LOCK``)."""

    def __init__(self):
        j = java()
        cls = jclass("java.lang.Class")
        h, mt = jclass("java.lang.invoke.MethodHandles"), jclass("java.lang.invoke.MethodType")
        lookup = h.publicLookup()
        string, analyzer = cls.forName("java.lang.String"), cls.forName("org.apache.lucene.analysis.Analyzer")
        query = cls.forName("org.apache.lucene.search.Query")
        generator = cls.forName("io.anserini.search.query.BagOfWordsQueryGenerator")
        analyzed = _bind(h, lookup.findVirtual(generator, "buildQuery", mt.methodType(query, [string, analyzer, string])),
                         j.bag_of_words, FIELD, j.english)
        # (item) -> Query: a query text, or a term list's element (term_query.element)
        self.to_query = {ANALYZED: analyzed, TERMS: term_query.handle(FIELD), FIELD_TERMS: term_query.handle(None)}
        self.h, self.search = h, j.search
        self.function_type, self.callable = cls.forName("java.util.function.Function"), cls.forName("java.util.concurrent.Callable")
        self.proxies = jclass("java.lang.invoke.MethodHandleProxies")
        stream, collection = cls.forName("java.util.stream.Stream"), cls.forName("java.util.Collection")
        # (Collection texts, Function search) -> Object[]: texts.parallelStream().map(search).toArray()
        mapped = h.filterArguments(lookup.findVirtual(stream, "map", mt.methodType(stream, [self.function_type])), 0,
                                   lookup.findVirtual(collection, "parallelStream", mt.methodType(stream)))
        self.run_all = h.filterReturnValue(mapped, lookup.findVirtual(stream, "toArray", mt.methodType(
            cls.forName("[Ljava.lang.Object;"))))
        self.as_list = jclass("java.util.Arrays").asList
        self.integer = j.integer
        self._pools: dict[tuple[int, bool], object] = {}

    def function(self, searcher, kind: str, n: int):
        """The ``Function`` (item) -> packed top n of ``searcher``: the search handle with its
        searcher and depth bound, the item (a query text, or a term list's arrays) made a query of
        ``kind`` first."""
        h = self.h
        search = h.filterArguments(_bind(h, h.insertArguments(self.search, 2, self.integer(n)), searcher), 0,
                                   self.to_query[kind])
        return self.proxies.asInterfaceInstance(self.function_type, search)

    def pool(self, threads: int, deeper: bool = False):
        """A ``ForkJoinPool`` of ``threads`` workers, kept for the process (daemon threads).
        ``deeper``: the pool that searches again the queries whose k-th place ties past the hits
        fetched, apart, so that it never waits behind the next batches queued on the first."""
        if (pool := self._pools.get((threads, deeper))) is None:
            pool = self._pools[threads, deeper] = jclass("java.util.concurrent.ForkJoinPool")(threads)
        return pool


def _bind(h, handle, *values):
    """``handle`` with its first arguments fixed to ``values``, one at a time (pyjnius would pass
    several varargs of mixed classes as an array of the first one's class)."""
    for value in values:
        handle = h.insertArguments(handle, 0, value)
    return handle


handles = process_wide(_Handles)  # () -> _Handles


def search_function(index: LuceneIndex, kind: str, n: int):
    """``index``'s search ``Function`` for items of ``kind`` and depth ``n``, made once and kept on
    the index: one made per batch is new code that the JIT compiles again (its C2 compiler then
    took most of a core)."""
    key = (kind, n)
    with JNI_LOCK:
        if (function := index.batch_functions.get(key)) is None:
            function = index.batch_functions[key] = handles().function(index.searcher, kind, n)
    return function


class JavaBatch:
    """Search ``texts`` (query texts, or term lists' elements, as ``function`` takes them:
    ``search_function``) on ``threads`` Java threads, started at once; ``result()`` returns each query's packed hits (``bm25aug.ranking.PAIRS`` bytes)."""

    def __init__(self, function, texts: list, threads: int, deeper: bool = False):
        from jnius import cast

        j = handles()
        h = j.h
        with JNI_LOCK:
            task = _bind(h, j.run_all, j.as_list(*texts), function)
            self.started = time.perf_counter()
            self.future = j.pool(threads, deeper).submit(cast("java.util.concurrent.Callable",
                                                              j.proxies.asInterfaceInstance(j.callable, task)))

    def result(self) -> list[bytes]:
        """Wait for the batch (a Java error is raised as pyjnius's ``JavaException``); on an
        interrupt the batch is cancelled."""
        try:
            while True:
                with JNI_LOCK:
                    if self.future.isDone():
                        packed = self.future.get()
                        break
                time.sleep(min(max(_POLL_S, (time.perf_counter() - self.started) / 8), _POLL_MAX_S))
        except BaseException:
            self.cancel()
            raise
        return [p.tostring() for p in packed]

    def cancel(self) -> None:
        """Drop the batch: one still queued never runs; once started, its parallel stream's
        parts run to their end in Java (its result is never read)."""
        with JNI_LOCK:
            self.future.cancel(True)


class PendingSearch:
    """A batch running on the Java pool (``bm25aug.lucene.batch``); Python is free meanwhile."""

    def __init__(self, index: LuceneIndex, kind: str, texts: list, k: int, threads: int):
        self.index, self.kind, self.texts, self.k, self.threads = index, kind, texts, k, threads
        self.n = index.depth(k) if index.num_docs else 0
        self.batch = JavaBatch(search_function(index, kind, self.n), texts, threads) if texts and self.n else None

    def result(self) -> list[TopK]:
        if self.batch is None:
            return [EMPTY] * len(self.texts)
        results = self._packed(self.batch, self.texts)
        # As LuceneIndex.deepen, but on the Java pool: a query whose k-th place ties past the hits
        # fetched is searched again 4x deeper, all such queries of the batch in one.
        n, short = self.n, [i for i, pairs in enumerate(results) if not self.index.complete(pairs, self.n, self.k)]
        while short:
            n, texts = min(n * 4, self.index.num_docs), [self.texts[i] for i in short]
            self.batch = JavaBatch(search_function(self.index, self.kind, n), texts, self.threads, deeper=True)
            for i, pairs in zip(short, self._packed(self.batch, texts)):
                results[i] = pairs
            short = [i for i in short if not self.index.complete(results[i], n, self.k)]
        return anserini_top(results, self.k, self.index.id_rank)

    def _packed(self, batch: JavaBatch, texts: list) -> list[np.ndarray]:
        """Each query's Lucene hits (``PAIRS``); a query Lucene refused is searched alone, for its own error line."""
        from jnius import JavaException

        try:
            return [np.frombuffer(p, dtype=PAIRS) for p in batch.result()]
        except JavaException as e:
            for text in texts:
                self.index.search(self.index.query(self.kind, text), self.k)
            raise search_error(self.index.path, e) from None

    def cancel(self) -> None:
        if self.batch is not None:
            self.batch.cancel()
