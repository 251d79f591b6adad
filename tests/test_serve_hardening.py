"""``bm25aug serve`` under hostile clients and at its stop (issue 41): Host and Origin checks,
unfinished requests timed out, connections capped, abandoned searches never run, a stop that
answers or closes every request, MCP stdio answering every line, and one-line errors throughout.

The connection-level checks serve a tiny ASGI app on ``HttpServer`` in a thread (no index); the
rest run the real service on SciFact, in process or as the command a user runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from bm25aug.errors import UserError
from bm25aug.serve.config import IndexSpec, ServeConfig, load_config

LONG = "vitamin B12 deficiency causes neurological damage in older adults and children " * 3


# ------------------------------------------------------------------------- in-process server
def tiny_app(gate: threading.Event, stopped: threading.Event | None = None, holding: list | None = None):
    """An ASGI app: ``/hold`` answers once ``gate`` is set (503 once ``stopped`` is), ``/stuck``
    never, anything else at once; ``holding`` counts the requests it holds."""
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            return await send({"type": "lifespan.shutdown.complete"})
        status = 200
        if holding is not None and scope["path"] in ("/hold", "/stuck"):
            holding.append(scope["path"])
        while scope["path"] in ("/hold", "/stuck") and not gate.is_set():
            if stopped is not None and stopped.is_set() and scope["path"] == "/hold":
                status = 503
                break
            await asyncio.sleep(0.02)
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
    return app


def until(condition, what: str) -> None:
    """Wait (30 s at most) until ``condition()`` holds: the server has got that far."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


class InThread:
    """``HttpServer`` serving ``app`` on a free loopback port (or on ``sockets``), in a thread
    (stopped by ``stop``)."""

    def __init__(self, app, on_deadline=lambda: None, sockets=None, **settings):
        from bm25aug.serve.http_server import HttpServer, bind

        sockets = sockets or bind("127.0.0.1", 0)
        self.port = sockets[0].getsockname()[1]
        self.server = HttpServer(app, ServeConfig(**settings), sockets, "banner", on_deadline)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.uvicorn.started:
            assert time.monotonic() < deadline and self.thread.is_alive()
            time.sleep(0.02)

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=20)

    def connections(self) -> int:
        return len(self.server.uvicorn.server_state.connections)

    def stop(self) -> None:
        self.server.uvicorn.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive()


def read_all(s: socket.socket, resets: list | None = None) -> bytes:
    """Everything the server sends until it closes the connection (b'' reads as closed); a reset
    ends it too (noted in ``resets``)."""
    chunks = []
    try:
        while chunk := s.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        if resets is not None:
            resets.append("read")
    return b"".join(chunks)


def request(path: str, host: str = "localhost") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()


def json_error(raw: bytes) -> tuple[int, str]:
    head, _, body = raw.partition(b"\r\n\r\n")
    error = json.loads(body)["error"]
    assert "\n" not in error and "fix:" in error, error
    return int(head.split()[1]), error


def test_unfinished_requests_are_timed_out_and_a_bad_request_line_is_json():
    server = InThread(tiny_app(threading.Event()), header_timeout_s=0.5)
    try:
        silent, partial, huge = server.connect(), server.connect(), server.connect()
        partial.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")  # and never the blank line
        # Over httptools' 65,535-byte URL limit. The server answers and closes after about 64 KB, so
        # under load the send itself can be reset before the answer is read.
        resets = []
        try:
            huge.sendall(request("/x?q=" + "x" * 100_000))
        except (ConnectionResetError, BrokenPipeError):
            resets.append("send")
        assert read_all(silent) == b""  # closed, nothing to answer
        status, error = json_error(read_all(partial))
        assert status == 408 and "whole" in error
        answer = read_all(huge, resets)
        if answer or not resets:  # what could be read is the JSON 400
            status, error = json_error(answer)
            assert status == 400 and "65,535" in error
        with server.connect() as fine:  # a whole request is answered as ever
            fine.sendall(request("/health"))
            assert read_all(fine).startswith(b"HTTP/1.1 200")
    finally:
        server.stop()


def hold(server: InThread, n: int, holding: list) -> list[socket.socket]:
    """``n`` connections, each with a ``/hold`` request that ``tiny_app`` holds until its gate is set."""
    busy = [server.connect() for _ in range(n)]
    for s in busy:
        s.sendall(request("/hold"))
    until(lambda: len(holding) == n, f"the {n} busy requests held")
    return busy


def test_past_the_connection_cap_the_oldest_idle_connection_makes_room():
    gate, holding = threading.Event(), []
    server = InThread(tiny_app(gate, holding=holding), max_connections=4, header_timeout_s=60)
    try:
        idle = [server.connect() for _ in range(4)]
        until(lambda: server.connections() == 4, "the 4 idle connections accepted")
        with server.connect() as real:  # one over the cap: an idle one is closed, this one answered
            real.sendall(request("/health"))
            assert read_all(real).startswith(b"HTTP/1.1 200")
        assert read_all(idle[0]) == b""  # the oldest, which never sent a request
        busy = hold(server, 4, holding)
        with server.connect() as refused:  # every connection busy: this one is refused, not left waiting
            status, error = json_error(read_all(refused))
            assert status == 503 and "connections" in error
        gate.set()
        assert all(read_all(s).startswith(b"HTTP/1.1 200") for s in busy)
        for s in idle[1:]:
            s.close()
    finally:
        server.stop()


def test_a_stop_answers_what_waits_and_closes_the_rest_without_tracebacks(capfd):
    """At the stop, a request still waiting gets its answer from ``on_deadline`` (the service's
    503), and one stuck past ``shutdown_s`` has its connection closed; nothing is logged."""
    gate, stopped, holding = threading.Event(), threading.Event(), []
    server = InThread(tiny_app(gate, stopped, holding), on_deadline=stopped.set, shutdown_s=2)
    held, stuck = server.connect(), server.connect()
    held.sendall(request("/hold"))
    stuck.sendall(request("/stuck"))
    until(lambda: len(holding) == 2, "both requests in flight")
    server.stop()
    assert read_all(held).startswith(b"HTTP/1.1 503")
    assert read_all(stuck) == b""  # closed at shutdown_s, never left open
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in ASGI" not in err, err


def test_a_stop_writes_out_an_answer_still_in_the_write_buffer():
    """A large answer (a thousand hits with their documents) is still in the write buffer after
    its request's task has ended: the stop lets it reach a client that reads it, and closes the
    connection of one that never reads at ``shutdown_s`` (the stop aborted both at once)."""
    body = json.dumps({"candidates": [{"doc": "x" * 1000}] * 24_000}).encode()  # 24 MB, past the socket buffers
    written = []

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            return await send({"type": "lifespan.shutdown.complete"})
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        written.append(scope["path"])

    server = InThread(app, shutdown_s=3)
    reader, stalled = server.connect(), server.connect()
    reader.sendall(request("/big"))
    stalled.sendall(request("/big"))
    until(lambda: len(written) == 2, "both answers handed to the transport, their tasks done")
    state = server.server.uvicorn.server_state
    assert not state.tasks and any(c.transport.get_write_buffer_size() for c in list(state.connections))
    started = time.monotonic()
    server.server.uvicorn.should_exit = True  # as SIGTERM does
    time.sleep(0.5)  # the stop has begun before the client reads
    head, _, got = read_all(reader).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and len(got) == len(body) and json.loads(got) == json.loads(body)
    server.thread.join(30)
    assert not server.thread.is_alive() and time.monotonic() - started < 3 + 5  # the stalled one closed at 3 s
    assert len(read_all(stalled)) < len(body)


def test_every_address_of_the_host_is_listened_on(monkeypatch):
    """A host that lists ::1 before 127.0.0.1 (as many list localhost): both are listened on, on
    one port, and the banner's URL is the first (the socket of the first address only was bound)."""
    from bm25aug.serve.http_server import bind, url

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    real = socket.getaddrinfo

    def dual(host, port, *args, **kwargs):
        if host == "dual.test":
            return real("::1", port, *args, **kwargs) + real("127.0.0.1", port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", dual)
        sockets = bind("dual.test", 0)
    port = sockets[0].getsockname()[1]
    assert [s.family for s in sockets] == [socket.AF_INET6, socket.AF_INET]
    assert {s.getsockname()[1] for s in sockets} == {port} and url(sockets) == f"http://[::1]:{port}"
    server = InThread(tiny_app(threading.Event()), sockets=sockets)
    try:
        for address in ("::1", "127.0.0.1"):
            with socket.create_connection((address, port), timeout=20) as s:
                s.sendall(request("/health"))
                assert read_all(s).startswith(b"HTTP/1.1 200"), address
    finally:
        server.stop()


def test_a_uvicorn_without_an_internal_the_server_uses_is_one_line(monkeypatch):
    """The server subclasses uvicorn's internals; another uvicorn that lacks one is refused at
    start, naming the version and the pin, not an AttributeError mid-request."""
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    from bm25aug.serve.http_server import HttpServer, bind

    for cls, name, value in ((HttpToolsProtocol, "send_400_response", None),
                             (ServerState, "__init__", lambda self: None)):  # sets neither connections nor tasks
        sockets = bind("127.0.0.1", 0)
        try:
            with monkeypatch.context() as patch:
                if value is None:
                    patch.delattr(cls, name)
                else:
                    patch.setattr(cls, name, value)
                with pytest.raises(UserError) as refused:
                    HttpServer(tiny_app(threading.Event()), ServeConfig(), sockets, "banner")
        finally:
            for sock in sockets:
                sock.close()
        message = str(refused.value)
        assert f"uvicorn {uvicorn.__version__} lacks" in message and cls.__name__ in message, message
        assert "fix: pip install 'uvicorn[standard]>=0.54,<0.55'" in message and "\n" not in message


def handshake(port: int, host: str = "localhost", origin: str | None = None) -> bytes:
    """A WebSocket handshake's answer: the head (101) or the whole refusal."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall((f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                   + (f"Origin: {origin}\r\n" if origin else "") + "\r\n").encode())
        raw = b""
        while b"\r\n\r\n" not in raw and (chunk := s.recv(65536)):
            raw += chunk
        return raw if raw.startswith(b"HTTP/1.1 101") else raw + read_all(s)


def test_a_websocket_handshake_has_its_host_and_origin_checked():
    """uvicorn[standard] upgrades WebSocket handshakes: one from a foreign Host or Origin is refused
    (421, 403, the JSON error) before the app sees it, as an HTTP request is (it was passed on)."""
    from bm25aug.serve.guard import RequestGuard

    async def app(scope, receive, send):
        if scope["type"] == "websocket":
            await receive()
            return await send({"type": "websocket.accept"})
        await tiny_app(threading.Event())(scope, receive, send)

    server = InThread(RequestGuard(app, ServeConfig()))
    try:
        assert handshake(server.port).startswith(b"HTTP/1.1 101")
        assert handshake(server.port, origin="http://localhost:3000").startswith(b"HTTP/1.1 101")
        status, error = json_error(handshake(server.port, host="evil.example:8081"))
        assert status == 421 and "--allowed-hosts" in error
        status, error = json_error(handshake(server.port, origin="http://evil.example"))
        assert status == 403 and "--allowed-origins" in error
    finally:
        server.stop()


# --------------------------------------------------------------------- Host, Origin, docids
@pytest.fixture(scope="module")
def service(scifact_flat):
    from bm25aug.serve.service import SearchService

    service = SearchService(ServeConfig(indexes=[IndexSpec("s", str(scifact_flat))], workers=1, max_batch=1))
    yield service
    service.close()


def asgi_get(app, path: str, headers: dict | None = None, base: str = "http://localhost") -> httpx.Response:
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base) as client:
            return await client.get(path, headers=headers)
    return asyncio.run(run())


def test_a_foreign_host_or_origin_is_refused_on_rest_and_mcp_alike(service):
    """DNS rebinding: a page from another site reaches a loopback server under its own Host/Origin."""
    from bm25aug.serve.rest import create_app

    rest = create_app(service)
    for base in ("http://localhost:8081", "http://127.0.0.1", "http://[::1]:9"):
        assert asgi_get(rest, "/v1/s/doc/4983", base=base).status_code == 200, base
    assert asgi_get(rest, "/v1/s/doc/4983", base="http://evil.example:8081").status_code == 421
    from bm25aug.serve.mcp_tools import create_mcp, mcp_http_app

    mcp = mcp_http_app(create_mcp(service), service.config)
    for app, path in ((rest, "/v1/s/doc/4983"), (mcp, "/mcp")):  # the same guard in front of both
        refused = asgi_get(app, path, base="http://evil.example:8081")
        assert refused.status_code == 421 and "--allowed-hosts" in refused.json()["error"]
        refused = asgi_get(app, path, {"Origin": "http://evil.example"})
        assert refused.status_code == 403 and "--allowed-origins" in refused.json()["error"]
        assert "\n" not in refused.json()["error"]
    assert asgi_get(rest, "/health", {"Origin": "http://localhost:3000"}).status_code == 200
    wide = ServeConfig(indexes=service.config.indexes, allowed_hosts=["*"], allowed_origins=["https://app.example"])
    service.config, saved = wide, service.config
    try:
        assert asgi_get(create_app(service), "/health", {"Origin": "https://app.example"},
                        base="http://search.example").status_code == 200
    finally:
        service.config = saved


def test_a_docid_with_trailing_nuls_is_no_other_document(service):
    """numpy's fixed-width strings drop trailing NULs: '4983\\0' was looked up as '4983'."""
    from bm25aug.serve.rest import create_app
    from bm25aug.serve.service import ServeError

    app = create_app(service)
    assert asgi_get(app, "/v1/s/doc/4983").status_code == 200
    response = asgi_get(app, "/v1/s/doc/4983%00")
    assert response.status_code == 404 and "no document" in response.json()["error"]
    with pytest.raises(ServeError) as refused:  # MCP's get_document calls the same
        asyncio.run(service.document("s", "4983\x00\x00"))
    assert refused.value.status == 404


def test_a_search_whose_client_hung_up_is_never_run(service):
    """The worker is held; queued requests whose clients hang up are dropped, not searched, and a
    later client is answered as soon as the worker is free."""
    from bm25aug.serve.rest import create_app

    batcher, release, searched = service.backends["s"].batchers["bm25"], threading.Event(), []
    search = batcher.search
    batcher.search = lambda queries, k: (searched.extend(queries), release.wait(30), search(queries, k))[2]
    app = create_app(service)

    async def call(query: str, hang_up: asyncio.Event | None):
        sent, first = [], True

        async def receive():
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": b"", "more_body": False}
            if hang_up is None:
                await asyncio.Event().wait()
            await hang_up.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
                 "path": "/v1/s/search", "raw_path": b"/v1/s/search", "root_path": "",
                 "query_string": f"query={query}&hits=1000".encode(), "headers": [(b"host", b"localhost")],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8081)}
        await app(scope, receive, send)
        return sent[0]["status"] if sent else None

    async def run():
        hang_up = asyncio.Event()
        first = asyncio.ensure_future(call("held", asyncio.Event()))
        await asyncio.sleep(0.3)  # the worker holds it
        gone = [asyncio.ensure_future(call(f"gone{i}", hang_up)) for i in range(20)]
        await asyncio.sleep(0.3)
        hang_up.set()
        await asyncio.sleep(0.3)
        release.set()
        later = await call("later", None)
        await asyncio.gather(first, *gone)
        return later

    try:
        assert asyncio.run(run()) == 200
    finally:
        batcher.search = search
    assert searched == ["held", "later"]


# ------------------------------------------------------------------------- the real command
def start(args: list[str], log: Path, port: int = 0) -> tuple[subprocess.Popen, int]:
    """``bm25aug serve ARGS --port PORT``, answering; the port its banner prints."""
    process = subprocess.Popen([sys.executable, "-m", "bm25aug.cli", "serve", *args, "--port", str(port)],
                               stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while "REST API on http://" not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    port = int(log.read_text().split("REST API on http://127.0.0.1:")[1].split()[0])
    while port:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=30)
            break
        except httpx.TransportError:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    return process, port


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_port_0_prints_the_real_port_and_sigterm_prints_stopped(scifact_flat, tmp_path):
    process, port = start(["--index", f"s={scifact_flat}"], tmp_path / "log")
    try:
        assert port > 0 and httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert (tmp_path / "log").read_text().splitlines()[-1] == "stopped"


def test_a_port_in_use_is_one_line_before_anything_is_loaded(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # the index does not exist: the port is checked first, so the port is what is reported
        run = subprocess.run([sys.executable, "-m", "bm25aug.cli", "serve", "--index", f"x={tmp_path / 'none'}",
                              "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.startswith("error: port ") and "in use" in run.stderr
    assert "fix:" in run.stderr and len(run.stderr.strip().splitlines()) == 1 and "REST API on" not in run.stderr


def test_a_stop_answers_every_waiting_search_503(scifact_flat):
    """What waits for a search at the deadline (searching, or queued) is answered 503, and what
    was queued is never searched."""
    from bm25aug.serve.service import SearchService, ServeError

    service = SearchService(ServeConfig(indexes=[IndexSpec("s", str(scifact_flat))], workers=1, max_batch=1))
    batcher, release, searched = service.backends["s"].batchers["bm25"], threading.Event(), []
    search = batcher.search
    batcher.search = lambda queries, k: (searched.extend(queries), release.wait(30), search(queries, k))[2]

    async def run():
        running = asyncio.ensure_future(service.search("s", "held"))
        while not searched:
            await asyncio.sleep(0.02)
        queued = asyncio.ensure_future(service.search("s", "queued"))
        await asyncio.sleep(0.1)
        service.stop_waiting()
        return await asyncio.gather(running, queued, service.search("s", "late"), return_exceptions=True)

    try:
        answers = asyncio.run(run())
    finally:
        release.set()
        service.close()
    assert all(isinstance(a, ServeError) and a.status == 503 and a.retry_after for a in answers), answers
    assert searched == ["held"]


def test_sigterm_under_load_answers_or_closes_every_request(scifact_flat, tmp_path):
    """40 slow searches in flight, --shutdown-s 1: each client gets a 200, a 503 or a closed
    connection, the process exits 0 without waiting for its clients, and prints no traceback
    (uvicorn printed one a request and left their sockets open)."""
    process, port = start(["--index", f"s={scifact_flat}", "--threads", "1", "--workers", "1", "--max-batch", "1",
                           "--shutdown-s", "1"], tmp_path / "log", free_port())
    results = []

    def client(i: int):
        try:
            results.append(httpx.get(f"http://127.0.0.1:{port}/v1/s/search",
                                     params={"query": f"{LONG} {i}", "hits": 1000}, timeout=120).status_code)
        except httpx.TransportError as e:
            results.append(type(e).__name__)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    for t in threads:
        t.join(120)
    log = (tmp_path / "log").read_text()
    assert "Traceback" not in log and log.splitlines()[-1] == "stopped", log
    assert not {"ReadTimeout"} & set(results) and len(results) == 40, results
    assert set(results) <= {200, 503, "RemoteProtocolError", "ReadError", "ConnectError"}, results


# ------------------------------------------------------------------------------ config, MCP
def test_a_misspelt_key_in_an_index_entry_is_refused(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("indexes:\n  sf: {index: /x/sf, modle: /m}\n")
    with pytest.raises(UserError, match=r"unknown keys \['modle'\].*index, model"):
        load_config(path)


def test_mcp_argument_type_errors_are_one_line(service):
    from mcp.server.mcpserver.exceptions import ToolError

    from bm25aug.serve.mcp_tools import create_mcp

    mcp = create_mcp(service)
    for arguments in ({"index": "s", "query": "cells", "hits": 2.5}, {"index": "s", "query": None},
                      {"index": "s", "query": ["a"]}, {"index": "s", "query": "cells", "method": "rm3"}):
        with pytest.raises(ToolError) as refused:
            asyncio.run(mcp.call_tool("search", arguments))
        text = str(refused.value)
        assert "\n" not in text and "pydantic.dev" not in text and "fix:" in text, text


def test_mcp_stdio_answers_every_line(scifact_flat, tmp_path):
    """A line that is not JSON, a batch, a lone surrogate and a non-message each get a JSON-RPC
    error naming the fix (the SDK dropped them and the client waited for ever)."""
    process = subprocess.Popen([sys.executable, "-m", "bm25aug.cli", "serve", "--mcp", "--index", f"s={scifact_flat}"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(tmp_path / "err", "w"),
                               text=True, env=dict(os.environ))
    lines = ['{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
             '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}',
             '{"jsonrpc":"2.0","method":"notifications/initialized"}',
             "this is not json",
             '[{"jsonrpc":"2.0","id":100,"method":"tools/list"},{"jsonrpc":"2.0","id":101,"method":"tools/list"}]',
             '{"jsonrpc":"2.0","id":19,"method":"tools/call","params":{"name":"search","arguments":'
             '{"index":"s","query":"breast \\ud800 cancer"}}}',
             '{"id": 7}',
             # params nested 400 deep (the recursive surrogate check raised RecursionError, which ended the server)
             '{"jsonrpc":"2.0","id":21,"method":"tools/list","params":' + '{"a":' * 400 + '1' + '}' * 400 + '}',
             # a notification is never answered, even one that cannot be read
             '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"\\ud800"}}',
             '{"jsonrpc":"2.0","id":20,"method":"tools/list"}']
    try:
        out, _ = process.communicate("\n".join(lines) + "\n", timeout=300)
    finally:
        process.kill()
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    errors = {a.get("id"): a["error"] for a in answers if "error" in a}
    assert [a["error"]["code"] for a in answers if "error" in a and a.get("id") is None] == [-32700]
    assert errors[None]["code"] == -32700 and "fix:" in errors[None]["message"]
    assert errors[21]["code"] == -32600 and "nested" in errors[21]["message"]
    assert "dropped the notification 'notifications/cancelled'" in (tmp_path / "err").read_text()
    assert errors[100]["code"] == errors[101]["code"] == -32600 and "batch" in errors[100]["message"]
    assert errors[19]["code"] == -32602 and "surrogate" in errors[19]["message"]
    assert errors[7]["code"] == -32600
    assert {a["id"] for a in answers if "result" in a} == {1, 20}  # and the session carries on


def test_mcp_stdio_line_checks_need_no_stack_and_never_answer_a_notification():
    """The checks of one line never raise (a RecursionError ended the server: params nested 400
    deep as objects, 900 as arrays); JSON too deep for json itself is a parse error; a
    notification holding a lone surrogate gets no answer, a request the -32602 with its id."""
    from bm25aug.serve.mcp_stdio import refusals

    def call(params: str, mid: str = '"id":3,') -> str:
        return '{"jsonrpc":"2.0",' + mid + '"method":"tools/call","params":' + params + '}'

    for params in ('{"a":' * 400 + '"\\ud800"' + '}' * 400, '[' * 900 + '"\\ud800"' + ']' * 900):
        assert [code for _, code, _ in refusals(call(params))] == [-32602]
        assert refusals(call(params, mid="")) == []  # a notification: dropped, with a log line
    for params in ('{"a":' * 400 + '1' + '}' * 400, '[' * 900 + ']' * 900):
        (mid, code, message), = refusals(call(params))
        assert (mid, code) == (3, -32600) and "nested" in message and "fix:" in message
    (mid, code, message), = refusals(call('[' * 100_000 + ']' * 100_000))
    assert (mid, code) == (None, -32700) and "fix:" in message
