"""A cluster's address and a small HTTP client for it: JSON in and out, every node of the URL tried
in turn, an error as one line that names the node and the fix.

A cluster URL names its nodes and, after a slash, an index: ``http://127.0.0.1:9200,127.0.0.1:9201/scifact``
(``https://`` for TLS). A query string may set ``stats=local`` (``bm25aug.opensearch.index``).
Credentials never go in the URL: ``BM25AUG_OPENSEARCH_USER`` and ``BM25AUG_OPENSEARCH_PASSWORD``
give HTTP basic auth, ``BM25AUG_OPENSEARCH_CA`` a CA bundle to check the nodes' certificates with.

Only the standard library (``http.client``): one keep-alive connection per node and thread. A node
that refuses a connection or drops it is skipped for ``DOWN_S`` seconds; a request that no node
answers is an error naming each node and why.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode

from bm25aug.errors import UserError

SCHEMES = ("http://", "https://")
DOWN_S = 5.0  # how long a node that failed is tried last
TIMEOUT_S = 120.0  # one request; a force merge of a large index waits longer (``request(timeout=...)``)
_HOST = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$")
_INDEX = re.compile(r"^[a-z0-9][a-z0-9._+-]{0,199}$")  # OpenSearch's rule for index names, less the rare characters
_URL_FORM = "http://HOST:PORT[,HOST:PORT...]/INDEX (e.g. http://127.0.0.1:9200/scifact)"


def is_cluster(location) -> bool:
    """Whether ``location`` (an ``--index`` value) names a cluster rather than an index folder or a prebuilt name."""
    return isinstance(location, str) and location.lower().startswith(SCHEMES)


@dataclass(frozen=True)
class ClusterURL:
    """``scheme://host:port[,host:port...]/index?options``."""

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    index: str | None
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, url: str, need_index: bool = True) -> "ClusterURL":
        if not is_cluster(url):
            raise UserError(f"{url!r} is not a cluster URL; fix: write {_URL_FORM}")
        scheme, rest = url.split("://", 1)
        rest, _, query = rest.partition("?")
        netloc, _, path = rest.partition("/")
        if "@" in netloc:
            raise UserError("a cluster URL must not hold credentials (they would show in logs and runs); fix: set "
                            "BM25AUG_OPENSEARCH_USER and BM25AUG_OPENSEARCH_PASSWORD instead")
        hosts = []
        for part in netloc.split(","):
            match = _HOST.match(part.strip())
            if not match or (match.group(2) and not 0 < int(match.group(2)) < 65536):
                raise UserError(f"{part!r} in {url!r} is not HOST:PORT; fix: write {_URL_FORM}")
            hosts.append((match.group(1).strip("[]"), int(match.group(2) or 9200)))
        index = path.strip("/") or None
        if index is not None and not _INDEX.match(index):
            raise UserError(f"{index!r} is not an index name OpenSearch takes; fix: lower-case letters, digits, "
                            f"'.', '_', '-' and '+', not starting with one of the last four")
        if need_index and index is None:
            raise UserError(f"{url!r} names no index; fix: write {_URL_FORM}")
        return cls(scheme.lower(), tuple(hosts), index, tuple(parse_qsl(query, keep_blank_values=True)))

    @property
    def nodes(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.hosts)

    def __str__(self) -> str:
        query = f"?{urlencode(self.options)}" if self.options else ""
        return f"{self.scheme}://{self.nodes}" + (f"/{self.index}" if self.index else "") + query


class ClusterError(UserError):
    """The cluster answered with an error (``status``: its HTTP status; ``kind``: OpenSearch's error type)."""

    def __init__(self, message: str, status: int = 0, kind: str = ""):
        super().__init__(message)
        self.status, self.kind = status, kind


class Client:
    """JSON requests to a cluster's nodes (``ClusterURL``), thread-safe."""

    def __init__(self, url: ClusterURL, timeout: float = TIMEOUT_S):
        self.url, self.timeout = url, timeout
        self._local = threading.local()
        self._every: list[http.client.HTTPConnection] = []  # every thread's, for close()
        self._every_lock = threading.Lock()
        self._down: dict[tuple[str, int], float] = {}
        self._auth = _auth_header()
        self._tls = _tls_context() if url.scheme == "https" else None

    def request(self, method: str, path: str, body=None, params: dict | None = None, ndjson: bool = False,
                timeout: float | None = None, ok: tuple[int, ...] = ()) -> dict:
        """The decoded JSON answer. ``body``: a dict (JSON), a list of dicts (NDJSON lines when
        ``ndjson``), or None. An HTTP status of 400 or more is a ``ClusterError`` unless in ``ok``."""
        data = _encode(body, ndjson)
        target = path + (f"?{urlencode(params)}" if params else "")
        headers = {"Content-Type": "application/x-ndjson" if ndjson else "application/json", **self._auth}
        failures = []
        for host in self._order():
            try:
                status, payload = self._send(host, method, target, data, headers, timeout)
            except (ConnectionError, socket.timeout, http.client.HTTPException, OSError) as e:
                self._drop(host)
                self._down[host] = time.monotonic()
                failures.append(f"{host[0]}:{host[1]} ({_why(e)})")
                continue
            self._down.pop(host, None)
            answer = _decode(payload, host)
            if status >= 400 and status not in ok:
                raise _error(status, answer, method, path, host)
            return answer
        raise UserError(f"no node of the cluster answered {method} {path}: {', '.join(failures)}; fix: check that the "
                        f"cluster runs (`bm25aug cluster status`) and that the URL names its nodes")

    def _order(self) -> list[tuple[str, int]]:
        """The URL's nodes, those that failed lately last (each node is still tried)."""
        now = time.monotonic()
        return sorted(self.url.hosts, key=lambda h: now - self._down.get(h, -1e9) < DOWN_S)

    def _connection(self, host: tuple[str, int], timeout: float | None) -> http.client.HTTPConnection:
        pool = self._local.__dict__.setdefault("connections", {})
        if host not in pool:
            if self._tls is not None:
                pool[host] = http.client.HTTPSConnection(*host, timeout=self.timeout, context=self._tls)
            else:
                pool[host] = http.client.HTTPConnection(*host, timeout=self.timeout)
            with self._every_lock:
                self._every.append(pool[host])
        connection = pool[host]
        connection.timeout = timeout or self.timeout
        if connection.sock is not None:
            connection.sock.settimeout(connection.timeout)
        return connection

    def _send(self, host, method, target, data, headers, timeout) -> tuple[int, bytes]:
        connection = self._connection(host, timeout)
        try:
            connection.request(method, quote(target, safe="/?&=,:_*%+.-"), body=data, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        except BaseException:
            connection.close()
            raise

    def _drop(self, host) -> None:
        connection = self._local.__dict__.get("connections", {}).pop(host, None)
        if connection is not None:
            connection.close()
            with self._every_lock:
                self._every = [c for c in self._every if c is not connection]

    def close(self) -> None:
        """Close every thread's connections (a later request opens new ones)."""
        with self._every_lock:
            every, self._every = self._every, []
        for connection in every:
            connection.close()
        self._local = threading.local()


def _encode(body, ndjson: bool) -> bytes | None:
    if body is None:
        return None
    if ndjson:
        return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in body).encode("utf-8")
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _decode(payload: bytes, host) -> dict:
    try:
        return json.loads(payload) if payload else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{host[0]}:{host[1]} answered with something that is not JSON ({payload[:80]!r}); fix: "
                        f"point the URL at an OpenSearch node's HTTP port") from None


def _error(status: int, answer: dict, method: str, path: str, host) -> ClusterError:
    """OpenSearch's error as one line: its type and reason, the deepest shard failure's too."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        kind, reason = error.get("type", ""), error.get("reason", "")
        causes = error.get("failed_shards") or []
        if causes and isinstance(causes[0], dict):
            cause = causes[0].get("reason") or {}
            node = causes[0].get("node")
            reason += f"; shard {causes[0].get('shard')}" + (f" on node {node}" if node else "")
            if isinstance(cause, dict):
                reason += f": {cause.get('type', '')}: {cause.get('reason', '')}"
        elif isinstance(error.get("caused_by"), dict):
            reason += f" ({error['caused_by'].get('type', '')}: {error['caused_by'].get('reason', '')})"
    else:
        kind, reason = "", str(error or answer)[:200]
    message = f"{method} {path} on {host[0]}:{host[1]}: OpenSearch answered {status} {kind}: {reason}"
    fix = ("check BM25AUG_OPENSEARCH_USER and BM25AUG_OPENSEARCH_PASSWORD" if status in (401, 403)
           else "see the cluster's health (`bm25aug cluster status`, or GET _cluster/health)" if status >= 500
           else "see the message; the request was refused as it stands")
    return ClusterError(f"{' '.join(message.split())}; fix: {fix}", status, kind)


def _why(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, socket.timeout):
        return "timed out"
    if isinstance(e, ssl.SSLError):
        return f"TLS: {e.reason or e}"
    return type(e).__name__ + (f": {e}" if str(e) else "")


def _auth_header() -> dict[str, str]:
    user, password = os.environ.get("BM25AUG_OPENSEARCH_USER"), os.environ.get("BM25AUG_OPENSEARCH_PASSWORD")
    if not user:
        return {}
    token = base64.b64encode(f"{user}:{password or ''}".encode("utf-8")).decode("ascii")
    return {"Authorization": f"Basic {token}"}


def _tls_context() -> ssl.SSLContext:
    ca = os.environ.get("BM25AUG_OPENSEARCH_CA")
    if ca and not os.path.isfile(ca):
        raise UserError(f"BM25AUG_OPENSEARCH_CA={ca!r} is not a file; fix: point it at the cluster's CA bundle (PEM)")
    return ssl.create_default_context(cafile=ca or None)
