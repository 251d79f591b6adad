"""The served indexes and what can be asked of them, whatever the protocol (REST or MCP).

``SearchService`` owns one ``Backend`` per served index: a ``BM25Searcher``, optionally an
``AugmentedSearcher`` on the same index, and one ``MicroBatcher`` per method. Requests are
checked here, once, for both protocols; a bad one is a ``ServeError`` with an HTTP status and a
one-line message naming the problem and the fix.

Search results equal the in-process searchers' (``AugmentedSearcher.search``, ``BM25Searcher.search``):
a micro-batch runs ``batch_search_arrays``, which gives each query exactly the hits it gets alone.
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

from bm25aug.errors import UserError
from bm25aug.limits import check_text
from bm25aug.lucene.ranking import TopK
from bm25aug.lucene.reader import RAW_FIELD, stored_values
from bm25aug.serve.batcher import MicroBatcher, Overloaded
from bm25aug.serve.config import IndexSpec, ServeConfig

if TYPE_CHECKING:
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

log = logging.getLogger(__name__)
API = "v1"
METHODS = ("bm25", "augmented")


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
    batchers: dict[str, MicroBatcher] = field(default_factory=dict)
    _docs: OrderedDict = field(default_factory=OrderedDict)
    _docs_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def methods(self) -> tuple[str, ...]:
        return METHODS if self.augmented is not None else ("bm25",)

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
            fetched = dict(zip(missing, stored_values(self.bm25.index.reader, missing, RAW_FIELD)))
            out.update(fetched)
            with self._docs_lock:
                self._docs.update(fetched)
                while len(self._docs) > self.doc_cache:
                    self._docs.popitem(last=False)
        return [out[int(n)] for n in numbers]

    def batch(self, method: str, queries: list[str], k: int, threads: int) -> list[tuple[TopK, list[str | None]]]:
        """Each query's top k and the stored documents of its hits."""
        searcher = self.augmented if method == "augmented" else self.bm25
        # A lone query is searched on this thread: the Java pool's hand-off would only add latency.
        tops = [searcher.search_arrays(queries[0], k)] if len(queries) == 1 else \
            searcher.batch_search_arrays(queries, k, threads)
        return [(top, self.documents(top.lucene_ids)) for top in tops]


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
        from bm25aug.search.augmented import AugmentedSearcher
        from bm25aug.search.bm25 import BM25Searcher
        from bm25aug.search.command import resolve_index

        if not config.indexes:
            raise UserError("nothing to serve; fix: pass --index NAME=PATH (and --model NAME=PATH), or --config FILE")
        self.config, self.started = config, time.time()
        self.backends: dict[str, Backend] = {}
        for spec in config.indexes:
            path = resolve_index(spec.index)
            if spec.model:
                augmented = AugmentedSearcher.from_pretrained(spec.model, path, config.k1, config.b,
                                                              runtime=config.runtime)
                backend = Backend(spec, augmented.bm25, augmented, config.doc_cache)
            else:
                backend = Backend(spec, BM25Searcher(path, config.k1, config.b), None, config.doc_cache)
            for method in backend.methods:
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

    def close(self) -> None:
        """Let queued requests finish (up to ``shutdown_s``), then stop every batcher."""
        for backend in self.backends.values():
            for batcher in backend.batchers.values():
                batcher.close(self.config.shutdown_s)
        self._pool.shutdown(wait=True)

    async def _blocking(self, fn: Callable, *args):
        """``fn(*args)`` on the service's own threads (see ``__init__``), its refusals as 400s."""
        try:
            return await asyncio.wrap_future(self._pool.submit(fn, *args))
        except UserError as e:
            raise ServeError(400, str(e)) from None

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

    def check_hits(self, hits) -> int:
        """An integer from 1 to ``max_hits``."""
        if isinstance(hits, bool) or not isinstance(hits, int) or not 1 <= hits <= self.config.max_hits:
            raise ServeError(400, f"hits={hits!r} is out of range; fix: pass an integer from 1 to "
                                  f"{self.config.max_hits}")
        return hits

    def method(self, backend: Backend, method: str | None) -> str:
        """The asked-for method if the index has it, else its default (augmented where a model is loaded)."""
        method = method or backend.default_method
        if method not in backend.methods:
            why = ("no model is loaded for it" if method == "augmented" else f"{method!r} is not a method")
            raise ServeError(400, f"index {backend.spec.name!r} cannot search with method={method!r} ({why}); fix: "
                                  f"use one of {', '.join(backend.methods)}")
        return method

    # ---------------------------------------------------------------------------- requests
    async def search(self, index: str, query: str, hits: int = 10, method: str | None = None,
                     parse: bool = True) -> dict:
        """Anserini's ``SearchResponse``: ``{api, index, query: {text}, candidates: [{docid, score, rank, doc}]}``
        (plus ``method``)."""
        backend = self.backend(index)
        query, hits, method = self.check_query(query), self.check_hits(hits), self.method(backend, method)
        try:
            future = backend.batchers[method].submit(query, hits)
        except Overloaded as e:
            raise ServeError(503, f"{e}; fix: retry later, or add replicas", e.retry_after) from None
        try:
            top, docs = await asyncio.wrap_future(future)
        except UserError as e:
            raise ServeError(400, str(e)) from None
        ids = backend.bm25.docids[top.lucene_ids].tolist()
        candidates = [{"docid": d, "score": s, "rank": r, "doc": parse_document(doc, parse)}
                      for r, (d, s, doc) in enumerate(zip(ids, top.scores.tolist(), docs), 1)]
        return {"api": API, "index": index, "method": method, "query": {"text": query}, "candidates": candidates}

    async def augment(self, index: str, query: str) -> dict:
        """The query's weighted term list, and what the model added and reweighted (``AugmentedQuery``)."""
        backend = self.backend(index)
        query = self.check_query(query)
        if backend.augmented is None:
            raise ServeError(400, f"index {index!r} has no model to augment queries with; fix: serve it with "
                                  f"--model {index}=MODEL_DIR")
        augmented = await self._blocking(backend.augmented.augment, query)
        return {"api": API, "index": index, "query": {"text": query}, "terms": augmented.terms,
                "added": augmented.added,
                "reweighted": {t: {"bm25": c, "learned": w, "indexed": t not in augmented.unindexed}
                               for t, (c, w) in augmented.reweighted.items()}}

    async def document(self, index: str, docid: str, parse: bool = True) -> dict:
        """Anserini's ``DocumentResponse``: ``{api, index, docid, doc}``."""
        backend = self.backend(index)
        number = int(backend.bm25.index.doc_numbers([docid])[0]) if docid else -1
        if number < 0:
            raise ServeError(404, f"index {index!r} has no document {docid!r}; fix: use a docid from its hits")
        raw = (await self._blocking(backend.documents, [number]))[0]
        return {"api": API, "index": index, "docid": docid, "doc": parse_document(raw, parse)}

    def indexes(self) -> list[dict]:
        """Each served index: its name, folder, size, flavor, model and methods."""
        return [{"name": name, "index": str(b.bm25.index_dir), "flavor": b.bm25.meta.flavor,
                 "num_docs": b.bm25.num_docs, "model": b.spec.model, "methods": list(b.methods),
                 "default_method": b.default_method} for name, b in self.backends.items()]

    def health(self) -> dict:
        """Liveness, requests answered and the mean micro-batch size."""
        batchers = [bt for b in self.backends.values() for bt in b.batchers.values()]
        batches, requests = sum(b.batches for b in batchers), sum(b.requests for b in batchers)
        return {"status": "ok", "indexes": len(self.backends), "uptime_s": round(time.time() - self.started, 1),
                "requests": requests, "mean_batch": round(requests / batches, 2) if batches else 0.0}
