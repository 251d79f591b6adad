"""The served indexes and what can be asked of them, whatever the protocol (REST or MCP).

``SearchService`` owns one ``Backend`` per served index: a ``BM25Searcher``, optionally an
``AugmentedSearcher`` on the same index, and one ``MicroBatcher`` per method. Requests are
checked here, once, for both protocols; a bad one is a ``ServeError`` with an HTTP status and a
one-line message naming the problem and the fix.

Search results equal the in-process searchers' (``AugmentedSearcher.search``, ``BM25Searcher.search``,
``BM25Searcher.search_terms``): a micro-batch runs ``batch_search_arrays`` (or
``batch_search_terms_arrays``), which gives each query exactly the hits it gets alone. A client's
weighted term list is the query side's output (what ``/augment`` returns, what ``bm25aug export``
writes), so it is searched as ``AugmentedSearcher`` searches its own: on a multifield index with
``AUGMENTED_FIELD_WEIGHTS`` (``Backend.term_fields``); a text query with ``method=bm25`` keeps
Pyserini's field weights.

A request waits for its search as an asyncio future that can end three ways besides its answer:
its client hangs up (the REST app cancels it; a search not yet started is then never run), the
server stops (``stop_waiting``: what still waits is answered 503), or its search is refused (400).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from bm25aug.errors import Unavailable, UserError
from bm25aug.limits import JAVA_INT_MAX, check_text
from bm25aug.ranking import TopK
from bm25aug.serve.batcher import MicroBatcher, Overloaded
from bm25aug.serve.config import IndexSpec, ServeConfig
from bm25aug.lucene.term_query import check_clauses, query_syntax
from bm25aug.search.term_lists import check_term_list

if TYPE_CHECKING:
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher
    from bm25aug.search.hybrid import HybridSearcher

log = logging.getLogger(__name__)
API = "v1"
METHODS = ("bm25", "augmented", "dense", "hybrid")  # an index's own: bm25, then what its spec loads
TERMS = "terms"  # the batcher of weighted term lists (BM25 on the client's own weights; multifield: term_fields)
LARGE = 100  # candidates past which an answer is built on the service's threads, not the event loop's
# How long /health reports an index unavailable after a request found it so (a 503: its cluster did
# not answer, or the index changed under the server); an answer from that index clears it sooner.
UNAVAILABLE_S = 30.0


class ServeError(Exception):
    """A request the server refuses: ``status`` (4xx, or 503 when overloaded) and a one-line message."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


@dataclass
class Backend:
    """One served index: its searchers, their batchers, and a cache of its stored documents."""

    spec: IndexSpec
    bm25: BM25Searcher
    augmented: AugmentedSearcher | None
    doc_cache: int
    hybrid: HybridSearcher | None = None  # the model (else bm25) fused with the spec's dense model
    term_fields: dict[str, float] | None = None  # the field weights of weighted term lists (multifield only)
    batchers: dict[str, MicroBatcher] = field(default_factory=dict)
    _docs: OrderedDict = field(default_factory=OrderedDict)
    _docs_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def searchers(self) -> dict:
        """Each method's searcher, in ``METHODS``' order."""
        found = {"bm25": self.bm25, "augmented": self.augmented, "dense": self.hybrid and self.hybrid.dense,
                 "hybrid": self.hybrid}
        return {method: found[method] for method in METHODS if found[method] is not None}

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.searchers)

    @property
    def default_method(self) -> str:
        return self.methods[-1]

    def documents(self, numbers) -> list[str | None]:
        """Raw stored documents by Lucene doc number, through a bounded LRU cache."""
        out: dict[int, str | None] = {}
        with self._docs_lock:
            for n in map(int, numbers):
                if n in self._docs:
                    self._docs.move_to_end(n)
                    out[n] = self._docs[n]
        missing = [int(n) for n in numbers if int(n) not in out]
        if missing:
            fetched = dict(zip(missing, self.bm25.index.stored(missing)))
            out.update(fetched)
            with self._docs_lock:
                self._docs.update(fetched)
                while len(self._docs) > self.doc_cache:
                    self._docs.popitem(last=False)
        return [out[int(n)] for n in numbers]

    def batch(self, method: str, queries: list, k: int, threads: int) -> list[tuple[TopK, list[str | None]]]:
        """Each query's top k (a text, or a weighted term list for ``TERMS``) and the stored
        documents of its hits."""
        # A lone query is searched on this thread: the Java pool's hand-off would only add latency.
        if method == TERMS:
            tops = [self.bm25.search_terms_arrays(queries[0], k, self.term_fields)] if len(queries) == 1 else \
                self.bm25.batch_search_terms_arrays(queries, k, threads, fields=self.term_fields)
        else:
            searcher = self.searchers[method]
            tops = [searcher.search_arrays(queries[0], k)] if len(queries) == 1 else \
                searcher.batch_search_arrays(queries, k, threads)
        return [(top, self.documents(top.lucene_ids)) for top in tops]


def as_candidates(ids: list[str], scores: list[float], docs: list[str | None], parse: bool) -> list[dict]:
    """Anserini's candidates, best first."""
    return [{"docid": d, "score": s, "rank": r, "doc": parse_document(doc, parse)}
            for r, (d, s, doc) in enumerate(zip(ids, scores, docs), 1)]


def parse_document(raw: str | None, parse: bool):
    """A stored document as Anserini's REST API returns it: parsed JSON, else the raw string."""
    if raw is None or not parse:
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class SearchService:
    """Every served index, loaded at start; searches are micro-batched per index and method."""

    def __init__(self, config: ServeConfig):
        from bm25aug.search.augmented import AUGMENTED_FIELD_WEIGHTS, AugmentedSearcher
        from bm25aug.search.bm25 import BM25Searcher
        from bm25aug.search.indexes import locate_index

        if not config.indexes:
            raise UserError("nothing to serve; fix: pass --index NAME=PATH (and --model NAME=PATH), or --config FILE")
        self.config, self.started = config, time.time()
        self.backends: dict[str, Backend] = {}
        for spec in config.indexes:
            path = locate_index(spec.index)
            if spec.model:
                augmented = AugmentedSearcher.from_pretrained(spec.model, path, config.k1, config.b,
                                                              runtime=config.runtime)
                backend = Backend(spec, augmented.bm25, augmented, config.doc_cache)
            else:
                backend = Backend(spec, BM25Searcher(path, config.k1, config.b), None, config.doc_cache)
            if spec.dense:
                backend.hybrid = self._hybrid(backend, spec)
            if backend.bm25.meta.flavor == "multifield":  # term lists as AugmentedSearcher searches its own
                backend.term_fields = backend.bm25.field_weights(AUGMENTED_FIELD_WEIGHTS)
            for method in (*backend.methods, TERMS):
                backend.batchers[method] = MicroBatcher(
                    lambda queries, k, b=backend, m=method: b.batch(m, queries, k, config.threads),
                    config.max_batch, config.max_wait_ms, config.max_queue, config.workers, config.retry_after,
                    f"{spec.name}-{method}")
            self.backends[spec.name] = backend
            log.info("serving %s (%s; methods %s)", spec.name, path, ", ".join(backend.methods))
        # Documents and term lists are read here, on threads that live as long as the service: a
        # thread that calls Java stays attached to the JVM, so short-lived pool threads would pile
        # up there (and a thread dump of such a JVM crashed it).
        self._pool = ThreadPoolExecutor(config.workers, thread_name_prefix="bm25aug-serve")
        self._waiting: set[asyncio.Future] = set()  # requests waiting for a search (the event loop's thread only)
        self.stopping = False
        self.outages: dict[str, tuple[float, str]] = {}  # index name: when and why it was last unavailable

    def _hybrid(self, backend: Backend, spec: IndexSpec) -> HybridSearcher:
        """The index's model (else BM25) fused with its dense model, as ``HybridSearcher`` fuses."""
        from bm25aug.search.hybrid import Fusion, HybridSearcher, local_index
        from bm25aug.search.dense import DenseSearcher

        sparse = backend.augmented or backend.bm25
        fusion = Fusion(self.config.fusion, self.config.fusion_weight, self.config.fusion_depth)
        return HybridSearcher(sparse, DenseSearcher(local_index(sparse), spec.dense), fusion)

    def _batchers(self) -> list[MicroBatcher]:
        return [batcher for backend in self.backends.values() for batcher in backend.batchers.values()]

    def stop_waiting(self) -> None:
        """The server stops: every request still waiting is answered 503 now, and no queued search
        is run. Call it on the event loop's thread."""
        self.stopping = True
        for batcher in self._batchers():
            batcher.abort()
        for waiter in list(self._waiting):
            waiter.cancel()

    def close(self, timeout: float | None = None) -> None:
        """Let queued requests finish (up to ``timeout``, ``shutdown_s`` by default), then stop
        every batcher; their workers are daemon threads, so one stuck in a search ends with the process."""
        deadline = time.monotonic() + (self.config.shutdown_s if timeout is None else timeout)
        for batcher in self._batchers():
            batcher.close(max(0.0, deadline - time.monotonic()))
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _result(self, future, name: str | None = None):
        """The answer of a search or a read on another thread (a ``concurrent.futures.Future``) for
        index ``name``: its refusal a 400; a 503 when the index is unavailable (its cluster does not
        answer, or it changed under the server: ``Unavailable``), or when the server stops first
        (``stop_waiting``)."""
        waiter = asyncio.wrap_future(future)
        self._waiting.add(waiter)
        try:
            answer = await waiter
            if name is not None:
                self.outages.pop(name, None)
            return answer
        except Unavailable as e:
            if name is not None:
                self.outages[name] = (time.monotonic(), str(e))
            raise ServeError(503, str(e), e.retry_after) from None
        except UserError as e:
            raise ServeError(400, str(e)) from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.stopping and not (task is not None and task.cancelling()):
                raise ServeError(503, "the server is stopping; fix: retry the request (on another replica, or "
                                      "here once the server is back)", self.config.retry_after) from None
            raise
        finally:
            self._waiting.discard(waiter)

    async def offload(self, fn: Callable, *args, name: str | None = None):
        """``fn(*args)`` on the service's own threads (see ``__init__``) for index ``name``, its
        refusals as 400s (``_result``)."""
        if self.stopping:
            raise ServeError(503, "the server is stopping; fix: retry the request (on another replica, or here "
                                  "once the server is back)", self.config.retry_after)
        return await self._result(self._pool.submit(fn, *args), name)

    # ------------------------------------------------------------------------------ checks
    def backend(self, name: str) -> Backend:
        if (backend := self.backends.get(name)) is None:
            raise ServeError(404, f"no index named {name!r} is served; fix: use one of "
                                  f"{', '.join(sorted(self.backends))} (GET /v1/indexes lists them)")
        return backend

    def check_query(self, query) -> str:
        """A non-blank query within ``max_query_chars``, valid Unicode."""
        if not isinstance(query, str) or not query.strip():
            raise ServeError(400, "the query is empty; fix: pass query=TEXT with at least one word")
        if len(query) > self.config.max_query_chars:
            raise ServeError(400, f"the query has {len(query):,} characters, over this server's limit of "
                                  f"{self.config.max_query_chars:,}; fix: shorten it")
        try:
            return check_text(query, "the query")
        except UserError as e:
            raise ServeError(400, str(e)) from None

    def check_hits(self, hits, backend: Backend) -> int:
        """How many hits to search for: ``hits`` (a positive Java int, as Anserini parses it) up to
        the index's size, as Lucene and Anserini do; over ``max_hits`` that is a 400."""
        if isinstance(hits, bool) or not isinstance(hits, int) or not 1 <= hits <= JAVA_INT_MAX:
            raise ServeError(400, f"hits={hits!r} is out of range; fix: pass an integer from 1 to {JAVA_INT_MAX:,} "
                                  f"(at most {self.config.max_hits:,} are answered)")
        k = max(1, min(hits, backend.bm25.num_docs))
        if k > self.config.max_hits:
            raise ServeError(400, f"hits={hits:,} asks for {k:,} documents, over this server's limit of "
                                  f"{self.config.max_hits:,} a search; fix: pass hits of at most "
                                  f"{self.config.max_hits:,} (or start the server with a larger --max-hits)")
        return k

    def method(self, backend: Backend, method: str | None) -> str:
        """The asked-for method if the index has it, else its default (augmented where a model is loaded)."""
        method = method or backend.default_method
        if method not in backend.methods:
            why = {"augmented": "no model is loaded for it",
                   "dense": "no dense model is loaded for it", "hybrid": "no dense model is loaded for it"}
            raise ServeError(400, f"index {backend.spec.name!r} cannot search with method={method!r} "
                                  f"({why.get(method, f'{method!r} is not a method')}); fix: use one of "
                                  f"{', '.join(backend.methods)}")
        return method

    # ---------------------------------------------------------------------------- requests
    async def search(self, index: str, query: str, hits: int = 10, method: str | None = None,
                     parse: bool = True) -> dict:
        """Anserini's ``SearchResponse``: ``{api, index, query: {text}, candidates: [{docid, score, rank, doc}]}``
        (plus ``method``)."""
        backend = self.backend(index)
        query, k, method = self.check_query(query), self.check_hits(hits, backend), self.method(backend, method)
        candidates = await self._search(backend, method, query, k, parse)
        return {"api": API, "index": index, "method": method, "query": {"text": query}, "candidates": candidates}

    async def search_terms(self, index: str, terms, hits: int = 10, parse: bool = True) -> dict:
        """A weighted term list ``{term: weight}`` searched as ``BM25Searcher.search_terms`` does (index
        terms, not analyzed; on a multifield index with ``term_fields``, as ``method=augmented``),
        answered as ``search`` is; ``query`` holds the terms and, for people to read, the structure
        searched in Lucene's syntax (``query_syntax``)."""
        backend = self.backend(index)
        fields = backend.term_fields or backend.bm25.fields  # multifield: each term once per field
        try:
            terms = check_term_list(terms, self.config.max_terms)
            check_clauses(sum(w > 0 for w in terms.values()), len(fields) if fields else 1)  # before its micro-batch
        except UserError as e:
            raise ServeError(400, str(e)) from None
        if not any(w > 0 for w in terms.values()):  # a list searches nothing: no hits; a request for nothing is refused
            raise ServeError(400, "no term has a weight above 0, so nothing would be searched; fix: give at least one "
                                  "term a positive weight (0 drops a term)")
        k = self.check_hits(hits, backend)
        candidates = await self._search(backend, TERMS, terms, k, parse)
        text = query_syntax(terms, fields)  # what is searched, in Lucene's syntax
        return {"api": API, "index": index, "method": "bm25", "query": {"text": text, "terms": terms},
                "candidates": candidates}

    async def _search(self, backend: Backend, method: str, query, k: int, parse: bool) -> list[dict]:
        """One query through its micro-batcher, as Anserini's candidates."""
        try:
            future = backend.batchers[method].submit(query, k)
        except Overloaded as e:
            why = "the server is stopping" if self.stopping else str(e)
            raise ServeError(503, f"{why}; fix: retry later, or add replicas", e.retry_after) from None
        top, docs = await self._result(future, backend.spec.name)
        ids = backend.bm25.docids[top.lucene_ids].tolist()
        if len(ids) > LARGE:  # parsing a thousand documents took the event loop from every other request
            return await self.offload(as_candidates, ids, top.scores.tolist(), docs, parse)
        return as_candidates(ids, top.scores.tolist(), docs, parse)

    async def augment(self, index: str, query: str) -> dict:
        """The query's weighted term list, and what the model added and reweighted (``AugmentedQuery``)."""
        backend = self.backend(index)
        query = self.check_query(query)
        if backend.augmented is None:
            raise ServeError(400, f"index {index!r} has no model to augment queries with; fix: serve it with "
                                  f"--model {index}=MODEL_DIR")
        augmented = await self.offload(backend.augmented.augment, query, name=index)
        return {"api": API, "index": index, "query": {"text": query}, "terms": augmented.terms,
                "added": augmented.added,
                "reweighted": {t: {"bm25": c, "learned": w, "indexed": t not in augmented.unindexed}
                               for t, (c, w) in augmented.reweighted.items()}}

    async def document(self, index: str, docid: str, parse: bool = True) -> dict:
        """Anserini's ``DocumentResponse``: ``{api, index, docid, doc}``."""
        backend = self.backend(index)
        # The id found must be the id asked for: the id table is a numpy array of fixed-width strings,
        # which drop trailing NULs, so '4983\x00' looked up as '4983' (bm25aug.lucene.reader.doc_numbers).
        number = -1
        if isinstance(docid, str) and docid and "\x00" not in docid:  # on the service's threads: a cluster's is a request
            number = int((await self.offload(backend.bm25.index.doc_numbers, [docid], name=index))[0])
        if number < 0 or str(backend.bm25.docids[number]) != docid:
            raise ServeError(404, f"index {index!r} has no document {docid!r}; fix: use a docid from its hits")
        raw = (await self.offload(backend.documents, [number], name=index))[0]
        return {"api": API, "index": index, "docid": docid, "doc": parse_document(raw, parse)}

    def indexes(self) -> list[dict]:
        """Each served index: its name, folder, size, flavor, model and methods."""
        return [{"name": name, "index": str(b.bm25.index_dir), "flavor": b.bm25.meta.flavor,
                 "num_docs": b.bm25.num_docs, "model": b.spec.model, "dense": b.spec.dense, "methods": list(b.methods),
                 "default_method": b.default_method} for name, b in self.backends.items()]

    def health(self) -> dict:
        """Liveness, requests answered and the mean micro-batch size; ``status`` is ``unavailable``,
        with each index's reason in ``problems``, while an index was found unavailable within
        ``UNAVAILABLE_S`` (its cluster down, or the index changed under the server)."""
        batchers = [bt for b in self.backends.values() for bt in b.batchers.values()]
        batches, requests = sum(b.batches for b in batchers), sum(b.requests for b in batchers)
        now = time.monotonic()
        problems = {name: why for name, (when, why) in list(self.outages.items()) if now - when < UNAVAILABLE_S}
        return {"status": "unavailable" if problems else "ok", "indexes": len(self.backends),
                "uptime_s": round(time.time() - self.started, 1), "requests": requests,
                "mean_batch": round(requests / batches, 2) if batches else 0.0, "problems": problems}
