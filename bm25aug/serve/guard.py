"""What a request must be before any route sees it: a Host and an Origin this server answers, and
a body within ``max_body_bytes``. One ASGI middleware, in front of the REST app and of the MCP
streamable-HTTP app alike, so the two transports agree.

**DNS rebinding.** A web page on another site can make the browser resolve that site's name to
127.0.0.1 and then read a loopback server as if it were its own origin. Such a request still
carries the page's ``Host`` (and, for a script's request, its ``Origin``), so only the names a
browser on this machine uses for the server are answered: ``localhost``, ``127.0.0.1`` and
``[::1]``, at any port (as the ``mcp`` SDK's transport security allows by default), plus the
``--host`` address itself. Others are refused, 421 for the Host and 403 for the Origin, as that
SDK answers. A request without ``Origin`` (curl, any non-browser client) is answered, and so is
one without ``Host`` (HTTP/1.0): a browser always sends a Host. ``allowed_hosts`` and
``allowed_origins`` widen the lists; ``*`` allows any, for a server behind a proxy that checks them.
A WebSocket handshake is checked the same way (a page may open one to any host).
"""

from __future__ import annotations

import json
import re

from bm25aug.serve.config import ServeConfig

_PORT = re.compile(r":\d{1,5}$")
_WILDCARDS = ("0.0.0.0", "::", "")  # --host addresses that are not a name a client uses


def _name(host: str) -> str:
    """A ``--host`` address as a Host header names it (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def matches(value: str, allowed: tuple[str, ...]) -> bool:
    """Whether a Host (``name[:port]``) or Origin (``scheme://name[:port]``) header is allowed: an
    entry without a port allows any port, one with a port that port only, ``*`` anything."""
    value = value.strip().lower()
    return "*" in allowed or value in allowed or (_PORT.search(value) is not None
                                                  and _PORT.sub("", value) in allowed)


def allowed_hosts(config: ServeConfig) -> tuple[str, ...]:
    """``allowed_hosts`` and the ``--host`` address itself, when it is one (not 0.0.0.0 or ::)."""
    extra = () if config.host in _WILDCARDS else (_name(config.host).lower(),)
    return tuple(dict.fromkeys(config.allowed_hosts + extra))


def allowed_origins(config: ServeConfig) -> tuple[str, ...]:
    extra = () if config.host in _WILDCARDS else (f"http://{_name(config.host).lower()}",)
    return tuple(dict.fromkeys(config.allowed_origins + extra))


async def send_json(send, status: int, message: str, kind: str = "http") -> None:
    """A one-line ``{"error": ...}`` answer, on a connection that is then closed (``kind``
    ``websocket``: the handshake's refusal, by ASGI's denial-response extension)."""
    body = json.dumps({"error": message}, ensure_ascii=False).encode("utf-8")
    await send({"type": f"{kind}.http.response.start" if kind == "websocket" else "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": f"{kind}.http.response.body" if kind == "websocket" else "http.response.body", "body": body})


async def refuse(scope, receive, send, status: int, message: str) -> None:
    """``message`` as the answer to a request (HTTP) or a WebSocket handshake: the JSON error
    where the server can send one (ASGI's ``websocket.http.response``, as uvicorn can), else the
    handshake closed (a 403)."""
    if scope["type"] == "http":
        return await send_json(send, status, message)
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        return await send_json(send, status, message, "websocket")
    await send({"type": "websocket.close", "code": 1008, "reason": f"refused with {status}"})  # the server answers 403


class RequestGuard:
    """ASGI middleware: refuse a foreign Host (421) or Origin (403), or a body over
    ``max_body_bytes`` (413), with a one-line JSON error, before ``app`` sees the request; a
    WebSocket handshake (uvicorn[standard] upgrades them) has its Host and Origin checked alike.
    ``bodies=False`` leaves bodies to the app (the MCP transport limits its own). FastAPI's own
    ``max_body_size`` answers in plain text, so it is not used."""

    def __init__(self, app, config: ServeConfig, bodies: bool = True):
        self.app, self.max_body = app, (config.max_body_bytes if bodies else None)
        self.hosts, self.origins = allowed_hosts(config), allowed_origins(config)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            return await self.app(scope, receive, send)
        headers = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value.decode("latin-1"))
        host, origin = headers.get(b"host"), headers.get(b"origin")
        if host is not None and not matches(host, self.hosts):
            name = _PORT.sub("", host) or "NAME"
            return await refuse(scope, receive, send, 421, f"this server does not answer Host {host!r} (a page on "
                                f"another site may be reaching it through DNS rebinding); fix: use http://localhost "
                                f"or http://127.0.0.1, or start it with --allowed-hosts {name} ('*' behind a proxy "
                                f"that checks the Host)")
        if origin is not None and not matches(origin, self.origins):
            return await refuse(scope, receive, send, 403, f"this server does not answer pages from Origin {origin!r}; "
                                f"fix: start it with --allowed-origins {origin} to let that site's pages read it")
        if scope["type"] == "websocket" or self.max_body is None or scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        length = headers.get(b"content-length", "")
        if length.isdigit() and int(length) > self.max_body:
            return await send_json(send, 413, self._too_large(f"has {int(length):,} bytes, over"))
        # The body, read here whole up to the limit (a chunked one has no length to check), then handed on.
        chunks, size = [], 0
        while (message := await receive())["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > self.max_body:
                return await send_json(send, 413, self._too_large("(sent in chunks) is larger than"))
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                break
        first = [message]

        async def replay():
            return first.pop() if first else await receive()

        await self.app(scope, replay, send)

    def _too_large(self, has: str) -> str:
        return (f"the request body {has} this server's limit of {self.max_body:,} bytes; fix: send fewer "
                f"terms, or start it with a larger --max-body-bytes")
