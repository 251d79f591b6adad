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

A request cancelled while it waits (its client hung up, or the server stops: ``abort``) is never
searched: a worker drops it when it takes it from the queue, at no cost to the others.
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

    def __init__(self, retry_after: int):
        super().__init__(f"the server is busy (request queue full); retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass
class _Request:
    query: str
    k: int
    future: Future


class MicroBatcher:
    """Run ``search(queries, k)`` on batches of queued requests; ``submit`` returns a ``Future``."""

    def __init__(self, search: BatchFn, max_batch: int, max_wait_ms: float, max_queue: int, workers: int,
                 retry_after: int, name: str = "batcher"):
        self.search, self.max_batch, self.max_wait = search, max_batch, max_wait_ms / 1000
        self.retry_after = retry_after
        self._queue: queue.Queue[_Request | None] = queue.Queue(max_queue)
        self._lock = threading.Lock()  # submit and close: nothing is queued behind the stop sentinels
        self._closed = False
        self.batches = self.requests = 0  # the server's stats (mean batch size), updated under _lock
        self._workers = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for worker in self._workers:
            worker.start()

    def submit(self, query: str, k: int) -> Future:
        """Queue one query; ``Overloaded`` at once when the queue is full or the batcher closed."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise Overloaded(self.retry_after)
            try:
                self._queue.put_nowait(_Request(query, k, future))
            except queue.Full:
                raise Overloaded(self.retry_after) from None
        return future

    def abort(self) -> None:
        """Refuse new requests and cancel every queued one (the server stops: nothing more is searched)."""
        with self._lock:
            self._closed = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item.future.cancel()

    def close(self, timeout: float) -> None:
        """Finish what is queued, then stop the workers (waiting ``timeout`` seconds at most)."""
        with self._lock:
            self._closed = True
        deadline = time.monotonic() + timeout
        for _ in self._workers:
            try:
                self._queue.put(None, timeout=max(0.0, deadline - time.monotonic()))
            except queue.Full:  # workers stuck on a search: they are daemon threads, and the process ends
                break
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))

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
            # cancelled while queued (the client hung up): dropped, never searched
            batch = [r for r in batch if r.future.set_running_or_notify_cancel()]
            linger = len(batch) > 1
            if batch:
                with self._lock:
                    self.batches, self.requests = self.batches + 1, self.requests + len(batch)
                self._run(batch)
            if stop:
                return

    def _run(self, batch: list[_Request]) -> None:
        """One batch search per distinct k (so each request gets exactly what a search of its own
        k returns). A batch that fails is searched again request by request, so that one bad
        query fails its own request only."""
        by_k: dict[int, list[_Request]] = {}
        for request in batch:
            by_k.setdefault(request.k, []).append(request)
        for k, requests in by_k.items():
            try:
                results = self.search([r.query for r in requests], k)
            except BaseException as e:  # noqa: BLE001  (handed to the waiting request, which reports it)
                if len(requests) == 1:
                    requests[0].future.set_exception(e)
                    continue
                for r in requests:
                    self._run_alone(r)
                continue
            for r, result in zip(requests, results):
                r.future.set_result(result)

    def _run_alone(self, request: _Request) -> None:
        try:
            request.future.set_result(self.search([request.query], request.k)[0])
        except BaseException as e:  # noqa: BLE001
            request.future.set_exception(e)
