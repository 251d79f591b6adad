"""The HTTP connections: a request must arrive in time, open connections are capped, and a
request that cannot be parsed is answered with the one-line JSON error like any other.

uvicorn (0.54, httptools) has none of the first two. It arms no timer on a new connection, nor
while a request head or body is arriving: its ``timeout_keep_alive`` runs only between requests, so
a connection that sends nothing, or half a head, stays open for ever. ``limit_concurrency`` counts
connections only to answer 503 once a head is complete; it never closes one. So every connection
held open cost a file descriptor until they ran out (20,100 idle ones, and real requests failed).

Here (a subclass of uvicorn's httptools protocol, made per server by ``protocol_class``):

* **a request timeout**: a request must arrive whole, head and body, within ``header_timeout_s``
  of the connection opening or of its first byte (408 if it had begun, else the connection is
  closed); between requests uvicorn's keep-alive timeout (5 s) closes idle connections;
* **a connection cap**: past ``max_connections``, the oldest idle connection is closed (one that
  never sent a whole request first, then a keep-alive one between requests), so a real client
  still gets through; only when every one is busy is the new one answered 503 and closed;
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
                       "connection_made", "connection_lost", "on_message_begin", "on_message_complete",
                       "send_400_response", "shutdown")}
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


def protocol_class(header_timeout_s: float, max_connections: int, retry_after: int) -> type:
    """uvicorn's httptools protocol with a request timeout, a connection cap (shared by the
    connections of one server) and JSON parse errors."""
    try:
        import httptools
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        raise UserError("serving needs httptools, which is not installed; fix: pip install 'bm25aug[serve]' "
                        "(it brings uvicorn[standard])") from None
    open_connections: OrderedDict = OrderedDict()  # oldest first

    class Protocol(HttpToolsProtocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._timer = None
            self._begun = False  # a request's first byte has arrived and it is not whole yet
            self._served = False  # a whole request has arrived on this connection

        # ---------------------------------------------------------------- connection lifecycle
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            open_connections[self] = None
            self._arm()
            if len(open_connections) > max_connections:
                self._make_room()

        def connection_lost(self, exc) -> None:
            open_connections.pop(self, None)
            self._disarm()
            super().connection_lost(exc)

        def _idle(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _make_room(self) -> None:
            """Close the oldest idle connection (one that never sent a whole request first); when
            every other one is busy, refuse this one."""
            fallback = None
            for connection in open_connections:
                if connection is self or not connection._idle():
                    continue
                if not connection._served:
                    return connection._close()
                fallback = fallback or connection
            if fallback is not None:
                return fallback._close()
            self.transport.write(_response(503, "Service Unavailable", f"the server has {max_connections:,} "
                                           f"connections open, all busy; fix: retry after {retry_after} s"))
            self._close()

        def _close(self) -> None:
            open_connections.pop(self, None)  # now, not when the loop reports it lost: the cap counts it gone
            self._disarm()
            self.transport.close()

        # ------------------------------------------------------------------- request timeout
        def _arm(self) -> None:
            self._disarm()
            self._timer = self.loop.call_later(header_timeout_s, self._timed_out)

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
                                               f"{header_timeout_s:g} s; fix: send the whole request at once"))
            self.transport.close()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._begun = True
            self._arm()

        def on_message_complete(self) -> None:
            self._begun, self._served = False, True
            self._disarm()
            super().on_message_complete()

        # ----------------------------------------------------------------------- parse errors
        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to what httptools refuses, as the one-line JSON error."""
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

    return Protocol
