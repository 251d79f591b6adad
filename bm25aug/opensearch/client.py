"""A cluster's address and a small HTTP client for it: JSON in and out, every node of the URL tried
in turn, an error as one line that names the node and the fix.

A cluster URL names its nodes and, after a slash, an index: ``http://127.0.0.1:9200,127.0.0.1:9201/scifact``
(``https://`` for TLS). A query string may set ``stats=local`` (``bm25aug.opensearch.index``).
Credentials never go in the URL (one holding ``@`` is refused without echoing it):
``BM25AUG_OPENSEARCH_USER`` and ``BM25AUG_OPENSEARCH_PASSWORD`` give HTTP basic auth, sent only over
``https://`` (over ``http://`` they are refused unless ``BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH=1``,
then with a warning), ``BM25AUG_OPENSEARCH_CA`` a CA bundle to check the nodes' certificates with.

Only the standard library (``http.client``): one keep-alive connection per node and thread
(``transport``). Timeouts are of seconds: ``CONNECT_TIMEOUT_S`` to connect
(``BM25AUG_OPENSEARCH_CONNECT_TIMEOUT``), ``READ_TIMEOUT_S`` of silence before the node is probed
(``BM25AUG_OPENSEARCH_READ_TIMEOUT``); a node that answers the probe is busy and waited for up to
``BUSY_S`` (longer for a request that passes OpenSearch a ``timeout``, or a long operation's own
``request(timeout=...)``, such as a force merge). A node that refuses, drops a connection or stays
silent goes to the back of the list until it answers again (``nodes.Nodes``), so a silent node
costs one timeout and one probe (15 s), not one per request. A request that no node answers is a
``ClusterUnavailable`` naming each node and why; so is an answer that says the cluster cannot
serve now (5xx, 429): not the caller's fault (``bm25aug.errors.Unavailable``).
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
import ssl
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from bm25aug.errors import Unavailable, UserError
from bm25aug.opensearch.nodes import Nodes
from bm25aug.opensearch.transport import BUSY_S, CONNECT_TIMEOUT_S, READ_TIMEOUT_S, Connections, NodeFailed

SCHEMES = ("http://", "https://")
CONNECT_ENV, READ_ENV = "BM25AUG_OPENSEARCH_CONNECT_TIMEOUT", "BM25AUG_OPENSEARCH_READ_TIMEOUT"
USER_ENV, PASSWORD_ENV = "BM25AUG_OPENSEARCH_USER", "BM25AUG_OPENSEARCH_PASSWORD"
ALLOW_HTTP_AUTH_ENV = "BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH"  # "1": send credentials over http:// too
RETRY_AFTER_S = 5  # what an outage tells a caller to wait before trying again
_HOST = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$")
_INDEX = re.compile(r"^[a-z0-9][a-z0-9._+-]{0,199}$")  # OpenSearch's rule for index names, less the rare characters
_URL_FORM = "http://HOST:PORT[,HOST:PORT...]/INDEX (e.g. http://127.0.0.1:9200/scifact)"
_SERVER_TIMEOUT = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")  # OpenSearch's time units that a `timeout` takes
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
log = logging.getLogger(__name__)
_warned_http_auth: set[str] = set()  # the node lists warned about credentials over http://, once each


def is_cluster(location) -> bool:
    """Whether ``location`` (an ``--index`` value) names a cluster rather than an index folder or a prebuilt name."""
    return isinstance(location, str) and location.lower().startswith(SCHEMES)


@dataclass(frozen=True)
class ClusterURL:
    """``scheme://host:port[,host:port...]/index?options``. ``str()`` of one never holds credentials
    (``parse`` refuses them), so messages name the index by it, never by the text the user typed."""

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    index: str | None
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, url: str, need_index: bool = True) -> "ClusterURL":
        if not is_cluster(url):
            shown = "the location given" if "@" in str(url) else repr(url)  # it may hold a password: not echoed
            raise UserError(f"{shown} is not a cluster URL; fix: write {_URL_FORM}")
        if "@" in url:  # user:password@ (a password may hold '/' or '?', so anywhere): never echoed
            raise UserError("a cluster URL must not hold credentials (they would show in logs and runs); fix: set "
                            f"{USER_ENV} and {PASSWORD_ENV} instead, and write {_URL_FORM}")
        scheme, rest = url.split("://", 1)
        rest, _, query = rest.partition("?")
        netloc, _, path = rest.partition("/")
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


class ClusterUnavailable(ClusterError, Unavailable):
    """No node of the URL answered (``status`` 0), or the cluster answered that it cannot serve now
    (5xx, 429): an outage, not the caller's fault (``Unavailable``: the server answers 503)."""

    def __init__(self, message: str, status: int = 0, kind: str = ""):
        ClusterError.__init__(self, message, status, kind)
        self.retry_after = RETRY_AFTER_S


class Client:
    """JSON requests to a cluster's nodes (``ClusterURL``), thread-safe. ``timeout``: the read
    timeout in seconds (the silence after which a node is probed), ``connect_timeout`` the connect
    one (None: their environment variables, else ``READ_TIMEOUT_S`` and ``CONNECT_TIMEOUT_S``).
    ``credentials``: whether to send ``BM25AUG_OPENSEARCH_USER``'s (False for a cluster known to
    need none, such as ``bm25aug cluster start``'s)."""

    def __init__(self, url: ClusterURL, timeout: float | None = None, connect_timeout: float | None = None,
                 credentials: bool = True):
        self.url = url
        self.timeout = _timeout(timeout, READ_ENV, READ_TIMEOUT_S)
        self.connect_timeout = _timeout(connect_timeout, CONNECT_ENV, CONNECT_TIMEOUT_S)
        self._auth = _auth_header(url) if credentials else {}
        self.connections = Connections(_tls_context() if url.scheme == "https" else None, self.connect_timeout,
                                       self.timeout)
        self.nodes = Nodes(url.hosts, self.connections.probe)

    def request(self, method: str, path: str, body=None, params: dict | None = None, ndjson: bool = False,
                timeout: float | None = None, ok: tuple[int, ...] = ()) -> dict:
        """The decoded JSON answer. ``body``: a dict (JSON), a list of dicts (NDJSON lines when
        ``ndjson``), or None. ``timeout``: how long this request may take on a node that answers
        probes (None: ``BUSY_S``, or longer when ``params`` asks OpenSearch to wait a ``timeout``).
        An HTTP status of 400 or more is a ``ClusterError`` (``ClusterUnavailable`` for 5xx and
        429) unless in ``ok``."""
        data = _encode(body, ndjson)
        target = path + (f"?{urlencode(params)}" if params else "")
        headers = {"Content-Type": "application/x-ndjson" if ndjson else "application/json", **self._auth}
        patience = timeout or max(BUSY_S, _server_timeout(params) + self.timeout)
        failures, first = [], []
        for host in self.nodes.order():
            try:
                status, payload = self.connections.exchange(host, method, target, data, headers, patience)
            except NodeFailed as e:
                if self.nodes.failed(host):
                    first.append((host, str(e)))
                failures.append(f"{host[0]}:{host[1]} ({e})")
                continue
            self.nodes.answered(host)
            for skipped, why in first:
                self.nodes.skipped(skipped, f"{method} {path}", why)
            answer = _decode(payload, host)
            if status >= 400 and status not in ok:
                raise _error(status, answer, method, path, host)
            return answer
        raise ClusterUnavailable(f"no node of the cluster answered {method} {path}: {', '.join(failures)}; fix: check "
                                 f"that the cluster runs (`bm25aug cluster status`) and that the URL names its nodes")

    def close(self) -> None:
        """Close every thread's connections (a later request opens new ones)."""
        self.connections.close()


def _timeout(given, variable: str, default: float) -> float:
    """A timeout in seconds: ``given``, else ``variable`` from the environment, else ``default``;
    anything but a number above 0 is one line naming where it came from."""
    value = given if given is not None else (os.environ.get(variable) or "").strip() or default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        where = f"{variable}={value!r}" if given is None else f"a timeout of {value!r}"
        raise UserError(f"{where} is not a number of seconds above 0; fix: set it to e.g. {default:g}, or unset it "
                        f"for that default")
    return seconds


def _server_timeout(params: dict | None) -> float:
    """The seconds of a ``timeout`` parameter OpenSearch waits out itself (e.g. ``60s`` with
    ``wait_for_status``), which a request's patience must outlast; 0 when none."""
    match = _SERVER_TIMEOUT.match(str((params or {}).get("timeout", "")).strip())
    return float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0


def _encode(body, ndjson: bool) -> bytes | None:
    if body is None:
        return None
    if ndjson:
        return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in body).encode("utf-8")
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _decode(payload: bytes, host) -> dict:
    try:
        answer = json.loads(payload) if payload else {}
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        answer = None
    if not isinstance(answer, dict):
        raise UserError(f"{host[0]}:{host[1]} answered with something that is not a JSON object "
                        f"({payload[:80]!r}); fix: point the URL at an OpenSearch node's HTTP port") from None
    return answer


def _error(status: int, answer: dict, method: str, path: str, host) -> ClusterError:
    """OpenSearch's error as one line: its type and reason, the deepest shard failure's too."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        kind, reason = str(error.get("type", "")), str(error.get("reason", ""))
        causes = error.get("failed_shards") or []
        if isinstance(causes, list) and causes and isinstance(causes[0], dict):
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
    kind_of = ClusterUnavailable if status >= 500 or status == 429 else ClusterError  # 429: its queues are full
    return kind_of(f"{' '.join(message.split())}; fix: {fix}", status, kind)


def _auth_header(url: ClusterURL) -> dict[str, str]:
    """HTTP basic auth from the environment: over ``https://``; over ``http://`` refused unless
    ``BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH=1`` says so (then a warning, once per node list)."""
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if not user:
        return {}
    if url.scheme != "https":
        if os.environ.get(ALLOW_HTTP_AUTH_ENV, "").strip() != "1":
            raise UserError(f"{USER_ENV} is set, and {url.scheme}://{url.nodes} is plain HTTP, which would send the "
                            f"password in clear to every node; fix: use the nodes' https:// address, or set "
                            f"{ALLOW_HTTP_AUTH_ENV}=1 if no one else can read that network, or unset {USER_ENV}")
        if url.nodes not in _warned_http_auth:
            _warned_http_auth.add(url.nodes)
            log.warning("sending %s's credentials in clear over http:// to %s (%s=1)", USER_ENV, url.nodes,
                        ALLOW_HTTP_AUTH_ENV)
    token = base64.b64encode(f"{user}:{password or ''}".encode("utf-8")).decode("ascii")
    return {"Authorization": f"Basic {token}"}


def _tls_context() -> ssl.SSLContext:
    ca = os.environ.get("BM25AUG_OPENSEARCH_CA")
    if ca and not os.path.isfile(ca):
        raise UserError(f"BM25AUG_OPENSEARCH_CA={ca!r} is not a file; fix: point it at the cluster's CA bundle (PEM)")
    return ssl.create_default_context(cafile=ca or None)
