"""One request to one node of a cluster, over ``http.client``, with timeouts of seconds.

* ``CONNECT_TIMEOUT_S``: to open a connection (with its TLS handshake); also a probe's whole wait.
* ``READ_TIMEOUT_S``: the longest a node may stay silent (no byte of its answer, or between two
  parts of it). A node silent that long is *probed* (``PROBE``, the cluster's health, on a
  connection of its own, which the node answers only while it and its cluster manager work): a
  node that gives no answer below 500 within ``CONNECT_TIMEOUT_S`` is failed (``NodeFailed``) and
  the request goes to the next node; one that does is busy with the request, which is waited for,
  probing again every ``READ_TIMEOUT_S``, up to the request's *patience* (``BUSY_S``, or more for
  a request that asks OpenSearch to wait longer, or a long operation's own), answer read whole
  included.
* A kept-alive connection the node closed since its last answer (it dropped the connection
  without a byte) is opened again once, not counted as the node's failure.

So a node that accepts connections and never answers costs ``READ_TIMEOUT_S`` +
``CONNECT_TIMEOUT_S`` (15 s) once, a frozen one too (or one whose cluster manager is frozen), and
a busy cluster is still waited for.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
from urllib.parse import quote

CONNECT_TIMEOUT_S = 5.0  # to open a connection (and a TLS handshake); also a probe's whole wait
READ_TIMEOUT_S = 10.0  # the longest a node may stay silent before it is probed
BUSY_S = 120.0  # the longest a request waits on a node that answers probes (unless it asks for longer)
PROBE = "/_cluster/health"  # GET: answered at once by a node whose cluster has a working manager
TRANSPORT = (ConnectionError, socket.timeout, http.client.HTTPException, OSError)
# A kept-alive connection the node closed, or one left in a state it cannot send from.
_CLOSED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.ImproperConnectionState)


class NodeFailed(Exception):
    """A node gave no answer (refused, dropped the connection, silent and unprobeable): why, in a few words."""


class Connections:
    """One keep-alive connection per node and thread (``tls``: an ``ssl.SSLContext`` for https)."""

    def __init__(self, tls: ssl.SSLContext | None, connect_timeout: float, read_timeout: float):
        self.tls, self.connect_timeout, self.read_timeout = tls, connect_timeout, read_timeout
        self._local = threading.local()
        self._every: list[http.client.HTTPConnection] = []  # every thread's, for close()
        self._lock = threading.Lock()

    def exchange(self, host, method: str, target: str, data: bytes | None, headers: dict,
                 patience: float) -> tuple[int, bytes]:
        """The status and body of ``host``'s answer; ``NodeFailed`` saying why when there is none."""
        started = time.monotonic()
        for again in (False, True):
            connection, reused = self._connection(host)
            try:
                connection.request(method, quote(target, safe="/?&=,:_*%+.-"), body=data, headers=headers)
                self._await(connection, host, started, patience)
                response = connection.getresponse()
                return response.status, _body(response, started, patience)
            except BaseException as e:
                self.drop(host)
                if isinstance(e, _CLOSED) and reused and not again:
                    continue  # the node closed the idle connection: once more on a new one
                if isinstance(e, NodeFailed):
                    raise
                if isinstance(e, TRANSPORT):
                    raise NodeFailed(why(e, f"silent for {self.read_timeout:g} s")) from None
                raise
        raise AssertionError("unreachable")

    def _connection(self, host) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection to ``host``, connected, and whether it was open before."""
        pool = self._local.__dict__.setdefault("connections", {})
        connection = pool.get(host)
        if connection is not None and connection.sock is not None:
            return connection, True
        connection = pool[host] = self._new(host)
        with self._lock:
            self._every.append(connection)
        try:
            connection.connect()
        except TRANSPORT as e:
            self.drop(host)
            raise NodeFailed(why(e, f"no connection within {self.connect_timeout:g} s")) from None
        connection.sock.settimeout(self.read_timeout)
        return connection, False

    def _new(self, host) -> http.client.HTTPConnection:
        if self.tls is not None:
            return http.client.HTTPSConnection(*host, timeout=self.connect_timeout, context=self.tls)
        return http.client.HTTPConnection(*host, timeout=self.connect_timeout)

    def _await(self, connection, host, started: float, patience: float) -> None:
        """Return once ``host`` has begun to answer; while it is silent, probe it every read timeout."""
        while True:
            left = patience - (time.monotonic() - started)
            if left > 0 and select.select([connection.sock], [], [], min(self.read_timeout, left))[0]:
                return
            if time.monotonic() - started >= patience:
                raise NodeFailed(f"no answer within {patience:g} s, though it answers probes")
            if not self.probe(host):
                raise NodeFailed(f"silent for {self.read_timeout:g} s, and no answer to a probe within "
                                 f"{self.connect_timeout:g} s")

    def probe(self, host) -> bool:
        """Whether ``host`` answers ``GET PROBE`` below status 500 (401 and 403 too: no credentials
        are sent) within the connect timeout, on a connection of its own."""
        connection = self._new(host)
        try:
            connection.request("GET", PROBE)
            response = connection.getresponse()
            response.read()
            return response.status < 500
        except TRANSPORT:
            return False
        finally:
            connection.close()

    def drop(self, host) -> None:
        connection = self._local.__dict__.get("connections", {}).pop(host, None)
        if connection is not None:
            connection.close()
            with self._lock:
                self._every = [c for c in self._every if c is not connection]

    def close(self) -> None:
        """Close every thread's connections (a later request opens new ones)."""
        with self._lock:
            every, self._every = self._every, []
        for connection in every:
            connection.close()
        self._local = threading.local()


def _body(response: http.client.HTTPResponse, started: float, patience: float) -> bytes:
    """The whole body, each part within the read timeout and all of it within ``patience`` of ``started``."""
    parts = []
    while chunk := response.read1(1 << 16):
        parts.append(chunk)
        if time.monotonic() - started > patience:
            raise NodeFailed(f"its answer did not end within {patience:g} s")
    parts.append(response.read())  # b"", and the response closed: the connection can send again
    return b"".join(parts)


def why(e: BaseException, timed_out: str) -> str:
    """A transport error in a few words (``timed_out`` for a timeout)."""
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, socket.timeout):
        return timed_out
    if isinstance(e, ssl.SSLError):
        return f"TLS: {e.reason or e}"
    return type(e).__name__ + (f": {e}" if str(e) else "")
