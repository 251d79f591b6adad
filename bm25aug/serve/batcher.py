"""Micro-batching: concurrent requests gathered into one batch search, on worker threads.

A server that searched each request alone would run at one-query latency, one query at a time.
Here requests wait in a bounded queue; a worker takes whatever is queued when it is free (up to
``max_batch``) and searches it as one batch on the JVM's thread pool (``batch_search_arrays``). So
under load throughput follows batch throughput, while a lone request never waits for company: a
worker only lingers (up to ``max_wait_ms``) for more requests when its previous batch held more
than one, that is when requests are arriving together. A full queue refuses at once
(``Overloaded``: the server's 503 with Retry-After) instead of letting latency grow without bound.

Two workers by default: one encodes its batch (Python, with the GIL released inside ONNX Runtime)
while the other's batch searches in Java, so neither the encoder nor Lucene waits for the other.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

# (queries, k) -> one result per query, in order
BatchFn = Callable[[list[str], int], list]


class Overloaded(Exception):
    """The queue is full: the caller should retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: int = 1):
        super().__init__(f"the server is busy (request queue full); retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass
class _Request:
    query: str
    k: int
    future: Future


class MicroBatcher:
    """Run ``search(queries, k)`` on batches of queued requests; ``submit`` returns a ``Future``."""

    def __init__(self, search: BatchFn, max_batch: int = 32, max_wait_ms: float = 2.0, max_queue: int = 1024,
                 workers: int = 2, name: str = "batcher"):
        self.search, self.max_batch, self.max_wait = search, max_batch, max_wait_ms / 1000
        self._queue: queue.Queue[_Request | None] = queue.Queue(max_queue)
        self._closed = False
        self.batches = self.requests = 0  # for the server's stats: mean batch size = requests / batches
        self._workers = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for worker in self._workers:
            worker.start()

    def submit(self, query: str, k: int) -> Future:
        """Queue one query; ``Overloaded`` at once when the queue is full or the batcher closed."""
        if self._closed:
            raise Overloaded()
        future: Future = Future()
        try:
            self._queue.put_nowait(_Request(query, k, future))
        except queue.Full:
            raise Overloaded() from None
        return future

    def close(self, timeout: float = 30.0) -> None:
        """Finish what is queued, then stop the workers."""
        self._closed = True
        for _ in self._workers:
            self._queue.put(None)
        for worker in self._workers:
            worker.join(timeout)

    def _gather(self, first: _Request, linger: bool) -> tuple[list[_Request], bool]:
        """``first`` and whatever else is queued (waiting up to ``max_wait`` if ``linger``); True
        when the stop sentinel was met."""
        batch, deadline = [first], time.monotonic() + (self.max_wait if linger else 0.0)
        while len(batch) < self.max_batch:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _work(self) -> None:
        linger = False
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = self._gather(first, linger)
            linger = len(batch) > 1
            self.batches, self.requests = self.batches + 1, self.requests + len(batch)
            self._run(batch)
            if stop:
                return

    def _run(self, batch: list[_Request]) -> None:
        """One batch search per distinct k (so each request gets exactly what a search of its own
        k returns); an error goes to the requests of that search only."""
        by_k: dict[int, list[_Request]] = {}
        for request in batch:
            if request.future.set_running_or_notify_cancel():
                by_k.setdefault(request.k, []).append(request)
        for k, requests in by_k.items():
            try:
                results = self.search([r.query for r in requests], k)
            except BaseException as e:  # noqa: BLE001  (handed to the waiting request, which reports it)
                for r in requests:
                    r.future.set_exception(e)
                continue
            for r, result in zip(requests, results):
                r.future.set_result(result)
