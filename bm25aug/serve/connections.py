"""The HTTP connections: a request must arrive in time, open connections are capped, and a
request that cannot be parsed is answered with the one-line JSON error like any other.

uvicorn (0.54, httptools) has none of the first two. It arms no timer on a new connection, nor
while a request head or body is arriving: its ``timeout_keep_alive`` runs only between requests, so
a connection that sends nothing, or half a head, stays open for ever. ``limit_concurrency`` counts
connections only to answer 503 once a head is complete; it never closes one. So every connection
held open cost a file descriptor until they ran out (20,100 idle ones, and real requests failed).

Here (``_Guarded`` over uvicorn's httptools protocol, a class made per server by ``protocol_class``):

* **a request timeout**: a request must arrive whole, head and body, within ``header_timeout_s``
  of the connection opening or of its first byte (408 if it had begun, else the connection is
  closed); between requests uvicorn's keep-alive timeout (5 s) closes idle connections;
* **a connection cap**: past ``max_connections``, the oldest idle connection is closed (one that
  never sent a whole request first, then a keep-alive one between requests), so a real client
  still gets through; only when every one is busy is the new one answered 503 and closed;
* **a send timeout and a budget for unread answers**: an answer the client does not read waits
  in the server's memory (10,000 hits with their documents is about 8 MB). A connection whose
  answer fills the write buffer and then stands still for ``send_timeout_s`` is dropped (one that
  reads, however slowly, goes on), and all such answers together may hold ``unread_budget_mb``,
  past which those standing still are dropped first, so a hostile reader holds at most that much,
  for at most that long (docs/usage-serve.md);
* **a 503 without a reset**: a connection refused at the cap gets its 503 and an end of stream,
  and its request is read and dropped for up to 2 s (64 such connections at once; past that they
  are closed at once), since closing with it unread makes TCP reset the connection and the client
  lose the answer;
* **a JSON 400** for what the parser refuses (uvicorn's is plain text), such as a URL over
  httptools' 65,535 bytes.

This subclass and ``http_server`` use uvicorn's internals, not its public API: ``check_uvicorn``
refuses to start on a uvicorn that lacks one (the pin is ``UVICORN_PIN``).
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict

from bm25aug.errors import UserError


def _response(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": message}).encode("utf-8")
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n").encode("ascii") + body


UVICORN_PIN = "uvicorn[standard]>=0.54,<0.55"  # the uvicorn whose internals this module and http_server use
# What bm25aug overrides or reads of uvicorn's internals, by class: methods, and attributes its
# methods set (read from their code, as no instance exists before the server runs).
UVICORN_METHODS = {"uvicorn.server:Server": ("capture_signals", "startup", "shutdown", "run"),
                   "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol": (
                       "connection_made", "connection_lost", "data_received", "on_message_begin",
                       "on_message_complete", "pause_writing", "resume_writing", "send_400_response", "shutdown")}
UVICORN_ATTRIBUTES = {"uvicorn.server:Server": ("server_state", "servers", "lifespan", "should_exit", "force_exit",
                                                "started"),
                      "uvicorn.server:ServerState": ("connections", "tasks"),
                      "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol": ("cycle", "transport", "loop"),
                      "uvicorn.protocols.http.httptools_impl:RequestResponseCycle": (
                          "response_complete", "response_started", "disconnected", "keep_alive")}


def _attribute_names(cls: type) -> set[str]:
    """The attribute names the methods of ``cls`` (and its bases) use."""
    names: set[str] = set()
    for klass in cls.__mro__[:-1]:
        for value in vars(klass).values():
            code = getattr(getattr(value, "__func__", value), "__code__", None)
            if code is not None:
                names.update(code.co_names)
    return names


def check_uvicorn() -> None:
    """A ``UserError`` naming the fix when the installed uvicorn lacks an internal that bm25aug's
    server overrides or reads (they are not uvicorn's public API, so a release may change them)."""
    import importlib

    try:
        import uvicorn

        missing = []
        for where, methods in UVICORN_METHODS.items():
            module, name = where.split(":")
            cls = getattr(importlib.import_module(module), name, None)
            missing += [f"{name}.{m}" for m in methods if not callable(getattr(cls, m, None))]
        for where, attributes in UVICORN_ATTRIBUTES.items():
            module, name = where.split(":")
            cls = getattr(importlib.import_module(module), name, None)
            used = _attribute_names(cls) if isinstance(cls, type) else set()
            missing += [f"{name}.{a}" for a in attributes if a not in used]
    except ImportError as e:
        raise UserError(f"serving needs {e.name}, which is not installed; fix: pip install '{UVICORN_PIN}'") from None
    if missing:
        raise UserError(f"uvicorn {getattr(uvicorn, '__version__', '?')} lacks {', '.join(missing[:3])}"
                        f"{' and more' if len(missing) > 3 else ''}, which bm25aug serve relies on (it is written "
                        f"against uvicorn 0.54); fix: pip install '{UVICORN_PIN}'")


class _Guarded:
    """What bm25aug adds to uvicorn's httptools protocol (``protocol_class`` puts it first in the
    class's bases, so ``super()`` is uvicorn's). The settings and the registry of open connections
    are class attributes, shared by the connections of one server."""

    header_timeout_s: float
    send_timeout_s: float
    unread_budget: int  # bytes of answers waiting on slow readers, all connections together
    max_connections: int
    retry_after: int
    open_connections: OrderedDict  # oldest first
    stalled: OrderedDict  # connections whose unread answer filled the write buffer, longest stalled first
    refuse_linger_s = 2.0  # how long a refused connection's request is read and dropped, so TCP ends it cleanly
    max_lingering = 64  # refused connections read and dropped at once; past it they are closed at once
    lingering: set

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._timer = self._send_timer = None
        self._begun = False  # a request's first byte has arrived and it is not whole yet
        self._served = False  # a whole request has arrived on this connection
        self._refused = False  # answered 503 at the cap: what it still sends is read and dropped
        self._held = 0  # bytes its answer held in the write buffer at the last check (slow readers)

    # -------------------------------------------------------------------- connection lifecycle
    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.open_connections[self] = None
        self._arm()
        if len(self.open_connections) > self.max_connections:
            self._make_room()

    def connection_lost(self, exc) -> None:
        self.open_connections.pop(self, None)
        self.lingering.discard(self)
        self.stalled.pop(self, None)
        self._disarm()
        self._cancel_send_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _make_room(self) -> None:
        """Close the oldest idle connection (one that never sent a whole request first); when every
        other one is busy, refuse this one with the 503."""
        fallback = None
        for connection in self.open_connections:
            if connection is self or not connection._idle():
                continue
            if not connection._served:
                return connection._close()
            fallback = fallback or connection
        if fallback is not None:
            return fallback._close()
        self._refuse(_response(503, "Service Unavailable", f"the server has {self.max_connections:,} connections "
                                                            f"open, all busy; fix: retry after {self.retry_after} s"))

    def _refuse(self, answer: bytes) -> None:
        """Answer and end the connection without a reset: closing with the client's request still
        unread makes TCP reset it, and the client then loses the answer. So the answer is sent with
        an end of stream, and what the client still sends is dropped until it closes (at most
        ``refuse_linger_s``)."""
        self.open_connections.pop(self, None)  # the cap counts it gone
        self._disarm()
        self._refused = True
        self.transport.write(answer)
        if self.transport.can_write_eof() and len(self.lingering) < self.max_lingering:
            self.lingering.add(self)
            self.transport.write_eof()
            self.loop.call_later(self.refuse_linger_s, self._end_linger)
        else:  # a flood of refused connections: their file descriptors go at once (a client may see a reset)
            self.transport.close()

    def _end_linger(self) -> None:
        self.lingering.discard(self)
        self.transport.abort()

    def _close(self) -> None:
        self.open_connections.pop(self, None)  # now, not when the loop reports it lost: the cap counts it gone
        self._disarm()
        self.transport.close()

    # ----------------------------------------------------------------------- request timeout
    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.header_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._begun and (self.cycle is None or not self.cycle.response_started):
            if self.cycle is not None:
                self.cycle.disconnected = True  # the app's answer, if any, is not written after this one
            self.transport.write(_response(408, "Request Timeout", f"the request did not arrive whole within "
                                           f"{self.header_timeout_s:g} s; fix: send the whole request at once"))
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun = True
        self._arm()

    def on_message_complete(self) -> None:
        self._begun, self._served = False, True
        self._disarm()
        super().on_message_complete()

    # ------------------------------------------------------------- slow readers (send timeout)
    def pause_writing(self) -> None:
        """The client reads slower than its answer is written: the answer waits in memory. A check
        every ``send_timeout_s`` drops the connection once its answer stood still for a whole
        period (a client that reads, however slowly, goes on), and all waiting answers together
        may hold ``unread_budget`` bytes: past it, those that stood still since they began to wait
        are dropped first, longest waiting first."""
        super().pause_writing()
        self.stalled[self] = None
        self._held = self.transport.get_write_buffer_size()
        self._cancel_send_timer()
        self._send_timer = self.loop.call_later(self.send_timeout_s, self._check_progress)
        held = {c: c.transport.get_write_buffer_size() for c in self.stalled}
        total = sum(held.values())
        for connection in sorted(self.stalled, key=lambda c: held[c] < c._held):  # stable: the still ones first
            if total <= self.unread_budget:
                break
            total -= held[connection]
            connection._drop_unread()

    def _check_progress(self) -> None:
        self._send_timer = None
        held = self.transport.get_write_buffer_size()
        if held < self._held:  # the client read some of it since the last check
            self._held = held
            self._send_timer = self.loop.call_later(self.send_timeout_s, self._check_progress)
        else:
            self._drop_unread()

    def resume_writing(self) -> None:
        super().resume_writing()
        self.stalled.pop(self, None)
        self._cancel_send_timer()

    def _cancel_send_timer(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _drop_unread(self) -> None:
        """End a connection whose answer is not being read, freeing what its write buffer holds
        (a close would wait for the buffer to drain, which a client that never reads never lets)."""
        self._send_timer = None
        self.stalled.pop(self, None)
        self.open_connections.pop(self, None)
        self._disarm()
        if self.cycle is not None:
            self.cycle.disconnected = True
        self.transport.abort()

    # --------------------------------------------------------------------------- parse errors
    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to what httptools refuses, as the one-line JSON error."""
        import httptools

        self._disarm()
        error = sys.exc_info()[1]
        detail = str(getattr(error, "__context__", None) or error or msg).strip() or msg
        if isinstance(error, httptools.HttpParserError) and "url is too long" in detail:
            fix = "shorten the URL to at most 65,535 bytes"
        else:
            fix = "send a well-formed HTTP/1.1 request"
        self.transport.write(_response(400, "Bad Request", f"the request is not valid HTTP/1.1 ({detail}); "
                                       f"fix: {fix}"))
        self.transport.close()


def protocol_class(config) -> type:
    """uvicorn's httptools protocol with ``_Guarded``'s request timeout, connection cap, send
    timeout, budget for unread answers and JSON parse errors, set from ``config``
    (``ServeConfig``), for one server."""
    try:
        import httptools  # noqa: F401
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        raise UserError("serving needs httptools, which is not installed; fix: pip install 'bm25aug[serve]' "
                        "(it brings uvicorn[standard])") from None
    return type("Protocol", (_Guarded, HttpToolsProtocol), {
        "header_timeout_s": config.header_timeout_s, "send_timeout_s": config.send_timeout_s,
        "unread_budget": config.unread_budget_mb << 20, "max_connections": config.max_connections,
        "retry_after": config.retry_after, "open_connections": OrderedDict(), "stalled": OrderedDict(),
        "lingering": set()})
