"""The HTTP server under the REST app and the MCP streamable-HTTP app: uvicorn, with bm25aug's
start and stop.

* **Start.** ``bind`` takes the address (every address the host resolves to) before any index or
  model is loaded, so a port in use is one error line at once (uvicorn printed it after every
  model had loaded, with exit status 3), and ``--port 0`` is a real port from the start. The
  banner is printed once the sockets listen.
* **Stop** (SIGINT or SIGTERM; a second one stops at once). The server stops accepting, closes its
  idle connections and lets requests in flight finish, until ``shutdown_s`` less a moment. Then
  every request still waiting is answered 503 (``on_deadline``). Each connection closes once its
  answer is written out (a large one outlives its request's task in the write buffer); at
  ``shutdown_s``, any connection still open is closed. uvicorn's own stop cancelled such
  requests, printing a traceback each, and left their sockets open, so the process lived as long
  as its clients waited.
* Connections: ``bm25aug.serve.connections`` (a request timeout, a connection cap).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import sys
import threading
from typing import Callable

from bm25aug.errors import UserError
from bm25aug.serve.config import ServeConfig
from bm25aug.serve.connections import check_uvicorn, protocol_class

log = logging.getLogger(__name__)
ANSWER_MARGIN_S = 1.0  # before shutdown_s, what still waits is answered 503 (at most half of shutdown_s)
BIND_TRIES = 20  # --port 0 on several addresses: ports tried until one is free on all of them
FILES_BESIDE_CONNECTIONS = 512  # open files the process needs beside its connections (index, JVM, models)


def bind(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to ``host:port`` (not listening yet), one for each address ``host`` resolves
    to (``localhost``: 127.0.0.1 and ::1 where both are listed; an IPv6 socket then serves IPv6
    only, as uvicorn's did), all on one port (``--port 0``: the one the first picked); or one error
    line naming the fix. An address this machine cannot use (IPv6 switched off) is skipped while
    another one is bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        raise UserError(f"--host {host!r} is not an address this machine can listen on ({e}); fix: pass --host "
                        f"127.0.0.1, or an address of this machine") from None
    addresses = list(dict.fromkeys((family, kind, proto, address) for family, kind, proto, _, address in infos))
    for _ in range(BIND_TRIES if port == 0 else 1):
        sockets, chosen, unusable = [], port, None
        try:
            for family, kind, proto, address in addresses:
                try:
                    sockets.append(_bound(family, kind, proto, (address[0], chosen, *address[2:]), len(addresses) > 1))
                except OSError as e:
                    if e.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                        raise
                    unusable = unusable or e
                    continue
                chosen = sockets[-1].getsockname()[1]
            if not sockets:
                raise unusable
        except OSError as e:
            for sock in sockets:
                sock.close()
            if port == 0 and sockets and e.errno == errno.EADDRINUSE:
                continue  # the port the first address picked is taken on another one: pick again
            raise UserError(_bind_error(host, port, e)) from None
        return sockets
    raise UserError(f"no port was free on every address of {host} in {BIND_TRIES} tries; fix: pass --port with a "
                    f"free port, or --host with one address")


def _bound(family, kind, proto, address, several: bool) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if several and family == socket.AF_INET6:  # IPv4 has a socket of its own (asyncio's create_server does so)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _bind_error(host: str, port: int, e: OSError) -> str:
    if e.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is in use (another server is listening there); fix: stop it, or pass "
                f"--port with a free port (--port 0 picks one)")
    if e.errno in (errno.EACCES, errno.EPERM):
        return (f"port {port} needs privileges to listen on (ports below 1024 do); fix: pass --port 8081 or another "
                f"above 1023")
    if e.errno == errno.EADDRNOTAVAIL:
        return f"--host {host} is not an address of this machine; fix: pass --host 127.0.0.1, or one of its addresses"
    return f"cannot listen on {host}:{port} ({e.strerror or e}); fix: pass another --host or --port"


def raise_open_file_limit(max_connections: int) -> None:
    """Let the process hold ``max_connections`` sockets: its soft open-file limit (often 1,024)
    raised toward the hard one, and a warning when even that is too low."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + FILES_BESIDE_CONNECTIONS
    if soft == resource.RLIM_INFINITY or soft >= want:
        return
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    if soft < want:
        log.warning("the open-file limit (%d) leaves room for about %d connections, not --max-connections %d; "
                    "raise it (ulimit -n) or lower --max-connections", soft, soft - FILES_BESIDE_CONNECTIONS,
                    max_connections)


def url(sockets: list[socket.socket], scheme: str = "http") -> str:
    """The URL of the first bound address (the one ``--host`` names first)."""
    host, port = sockets[0].getsockname()[:2]
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


class _QuietWhenClosed:
    """ASGI wrapper: a request cancelled at the stop (its connection already closed) ends without
    a word; uvicorn would log each one as an 'Exception in ASGI application' traceback."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if scope["type"] != "http":
                raise


class HttpServer:
    """``app`` served on the bound ``sockets`` until SIGINT/SIGTERM; ``on_deadline`` answers what
    still waits (503) just before ``shutdown_s``."""

    def __init__(self, app, config: ServeConfig, sockets: list[socket.socket], banner: str,
                 on_deadline: Callable[[], None] = lambda: None):
        import uvicorn

        check_uvicorn()
        server = self

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):
                yield from server._signals(self)

            async def startup(self, sockets=None) -> None:
                await super().startup(sockets)
                if self.started:
                    print(banner, file=sys.stderr, flush=True)

            async def shutdown(self, sockets=None) -> None:
                await server._shutdown(self)

        raise_open_file_limit(config.max_connections)
        http = protocol_class(config)
        self.uvicorn = Server(uvicorn.Config(_QuietWhenClosed(app), http=http, log_level="error",
                                             access_log=False, lifespan="on", server_header=False))
        self.sockets, self.shutdown_s, self.on_deadline = list(sockets), config.shutdown_s, on_deadline

    def run(self) -> None:
        """Serve until stopped; a socket that cannot listen is one error line."""
        try:
            self.uvicorn.run(sockets=self.sockets)
        except OSError as e:  # listen() on a bound socket (another server bound it meanwhile)
            host, port = self.sockets[0].getsockname()[:2]
            raise UserError(_bind_error(host, port, e)) from None
        finally:
            for sock in self.sockets:
                sock.close()

    # ------------------------------------------------------------------------------------ stop
    @staticmethod
    def _signals(uv):
        """SIGINT and SIGTERM stop the server (a second one at once); unlike uvicorn's own, they are
        not raised again after it stops, so the command ends as a stop should (``stopped``, exit 0)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def stop(signum, frame) -> None:
            if uv.should_exit:
                uv.force_exit = True
            uv.should_exit = True

        saved = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in saved.items():
                signal.signal(s, handler)

    async def _shutdown(self, uv) -> None:
        """Stop accepting; close idle connections; let requests in flight finish and their answers
        reach the client (a connection closes once its answer is written, uvicorn's ``transport.close()``
        flushing it first) until ``shutdown_s``, answering what still waits 503 just before; then
        abort what is left: a client that does not read its answer, a task still running."""
        loop = asyncio.get_running_loop()
        state = uv.server_state
        deadline = loop.time() + self.shutdown_s
        for server in uv.servers:
            server.close()  # no new connections
        for connection in list(state.connections):
            connection.shutdown()  # idle ones close now (gracefully), busy ones once their answer is written

        async def until(done: Callable[[], bool], when: float) -> None:
            while not done() and not uv.force_exit and loop.time() < when:
                await asyncio.sleep(0.05)

        await until(lambda: not state.tasks, deadline - min(ANSWER_MARGIN_S, self.shutdown_s / 2))
        if state.tasks:
            self.on_deadline()  # what still waits for a search is answered 503
        # Every answer written out: a large one is still in the write buffer when its task ends.
        await until(lambda: not state.tasks and not state.connections, deadline)
        if state.tasks or state.connections:
            for connection in list(state.connections):
                connection.transport.abort()  # a client that does not read its answer, a task still running
            await asyncio.sleep(0)  # the connections are reported lost, so the tasks end without an answer
            for task in list(state.tasks):
                task.cancel()
            await until(lambda: not state.tasks, loop.time() + 0.5)
        if not uv.force_exit:
            await uv.lifespan.shutdown()
