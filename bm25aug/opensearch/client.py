"""A cluster's address, and ``Client``: bm25aug's requests to a cluster through one opensearch-py
``OpenSearch`` client, its errors as one line that names the request and the fix.

A cluster URL names its nodes and, after a slash, an index: ``http://127.0.0.1:9200,127.0.0.1:9201/scifact``
(``https://`` for TLS). A query string may set ``stats=local`` (``bm25aug.opensearch.index``) and
``field=NAME``, which names a text field of an index of the user's own (``bm25aug.opensearch.user_index``).
Credentials never go in the URL (one holding ``@`` is refused without echoing it): they come from
the environment (``transport``, which builds the client of a URL: timeouts, TLS, failover).

``Client.given`` wraps an ``OpenSearch`` client the user built (SigV4, API keys, certificates,
sniffing, pools: its own settings, never changed, never closed by bm25aug).

Every opensearch-py exception becomes ours here (``Client.call``), and only here: no answer from
any node (``ConnectionError``, ``ConnectionTimeout``, ``SSLError``) and an answer that says the
cluster cannot serve now (5xx, 429) are a ``ClusterUnavailable`` (``bm25aug.errors.Unavailable``:
not the caller's fault); any other refusal (``TransportError`` with a status) a ``ClusterError``
with OpenSearch's status and error type; an answer that is not JSON a ``UserError``. What is sent
again, and when, is ``bm25aug.opensearch.retry``'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as NoAnswer
from opensearchpy.exceptions import ConnectionTimeout, SerializationError, SSLError, TransportError
from opensearchpy.helpers import streaming_bulk

from bm25aug.errors import Unavailable, UserError
from bm25aug.opensearch import transport
from bm25aug.opensearch.answers import shaped
from bm25aug.opensearch.nodes import ProbedPool
from bm25aug.opensearch.transport import (CONNECT_ENV, CONNECT_TIMEOUT_S, PASSWORD_ENV, READ_ENV,  # noqa: F401
                                          READ_TIMEOUT_S, USER_ENV)

SCHEMES = ("http://", "https://")
RETRY_AFTER_S = 5  # what an outage tells a caller to wait before trying again
_HOST = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$")
_INDEX = re.compile(r"^[a-z0-9][a-z0-9._+-]{0,199}$")  # OpenSearch's rule for index names, less the rare characters
_URL_FORM = "http://HOST:PORT[,HOST:PORT...]/INDEX (e.g. http://127.0.0.1:9200/scifact)"
_SERVER_TIMEOUT = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")  # OpenSearch's time units that a `timeout` takes
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


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
        if not (isinstance(url, str) and url.lower().startswith(SCHEMES)):  # http:// or https://
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
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.hosts)

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
    """bm25aug's requests to a cluster (``url``: a ``ClusterURL``), thread-safe, through one
    ``OpenSearch`` client built for the URL (``transport.connect``). ``timeout``: the read timeout in
    seconds, ``connect_timeout`` the connect one (None: their environment variables, else
    ``READ_TIMEOUT_S`` and ``CONNECT_TIMEOUT_S``). ``credentials``: whether to send
    ``BM25AUG_OPENSEARCH_USER``'s (False for a cluster known to need none, such as
    ``bm25aug cluster start``'s)."""

    def __init__(self, url: ClusterURL, timeout: float | None = None, connect_timeout: float | None = None,
                 credentials: bool = True):
        self.url, self.owned = url, True
        self.timeout = transport.timeout(timeout, READ_ENV, READ_TIMEOUT_S)
        self.connect_timeout = transport.timeout(connect_timeout, CONNECT_ENV, CONNECT_TIMEOUT_S)
        self.opensearch = transport.connect(url, self.timeout, self.connect_timeout, credentials)

    @classmethod
    def given(cls, opensearch: OpenSearch, index: str | None) -> "Client":
        """A client the user built and configured (``opensearchpy.OpenSearch``), used as it is: its
        hosts, auth, TLS, timeouts, pool, sniffing and retries are its own; ``close`` leaves it open.
        ``index``: the index name, optionally with ``?stats=local``, as after a URL's slash."""
        if not isinstance(opensearch, OpenSearch):
            raise UserError(f"a client of type {type(opensearch).__name__} was given; fix: pass an "
                            f"opensearchpy.OpenSearch client (the synchronous one)")
        self = cls.__new__(cls)
        self.url, self.owned = _described(opensearch, index), False
        self.timeout, self.connect_timeout, self.opensearch = None, None, opensearch
        return self

    def request(self, method: str, path: str, body=None, params: dict | None = None, ndjson: bool = False,
                timeout: float | None = None, ok: tuple[int, ...] = ()) -> dict:
        """The decoded JSON answer. ``body``: a dict (JSON), a list of dicts (NDJSON lines when
        ``ndjson``), or None. ``timeout``: how long this request may take (None: the client's read
        timeout, or longer when ``params`` asks OpenSearch to wait a ``timeout``). An HTTP status of
        400 or more is a ``ClusterError`` (``ClusterUnavailable`` for 5xx and 429) unless in ``ok``."""
        wire = self.opensearch.transport
        headers = None
        if ndjson:
            body = "".join(wire.serializer.dumps(line) + "\n" for line in body)
            headers = {"content-type": "application/x-ndjson"}
        params = dict(params or {})
        if timeout is None and "timeout" in params:  # (opensearch-py would take it for the request's own)
            timeout = _server_timeout(params) + (self.timeout or READ_TIMEOUT_S)
        answer = self.call(f"{method} {path}", lambda: wire.perform_request(
            method, path, params=params or None, body=body, timeout=timeout, ignore=ok, headers=headers))
        if answer in ("", None):
            return {}
        if not isinstance(answer, dict):
            raise UserError(f"{self.url.nodes} answered {method} {path} with something that is not a JSON object "
                            f"({str(answer)[:80]!r}); fix: point the URL at an OpenSearch node's HTTP port")
        return answer

    def bulk(self, index: str, actions: list[dict]) -> list[tuple[bool, dict]]:
        """Each bulk action's (ok, {op: item}), in order, sent by opensearch-py's
        ``helpers.streaming_bulk`` as one request (or more, past its 100 MB), which reads each item
        and retries nothing (``max_retries=0``: ``retry`` decides)."""
        what = f"POST /{index}/_bulk"
        return shaped(self.url.nodes, what, lambda: self.call(what, lambda: list(streaming_bulk(
            self.opensearch, actions, chunk_size=max(len(actions), 1), raise_on_error=False, raise_on_exception=True,
            max_retries=0, index=index))))

    def call(self, what: str, send):
        """``send()``, an opensearch-py call; its exceptions as ours, naming ``what`` was asked."""
        try:
            return send()
        except NoAnswer as e:
            raise ClusterUnavailable(f"no node of the cluster answered {what} ({self.url.nodes}; the last: "
                                     f"{_why(e, self.timeout)}); fix: check that the cluster runs (`bm25aug cluster "
                                     f"status`) and that the URL names its nodes") from None
        except TransportError as e:
            raise _error(e.status_code, e.info if isinstance(e.info, dict) else _parsed(e.error), what) from None
        except SerializationError as e:
            raise UserError(f"{self.url.nodes} answered {what} with something that is not JSON ({str(e)[:80]}); fix: "
                            f"point the URL at an OpenSearch node's HTTP port") from None

    def failing(self) -> list[str]:
        """The nodes (``HOST:PORT``) asked last now, until they answer a probe (``nodes.ProbedPool``;
        none for one node, or a client the user built)."""
        pool = self.opensearch.transport.connection_pool
        return pool.nodes.failing() if isinstance(pool, ProbedPool) else []

    def close(self) -> None:
        """Close the connections of a client bm25aug built (a later request opens new ones); a
        client the user gave stays as it is."""
        if self.owned:
            self.opensearch.close()


def _described(opensearch: OpenSearch, index: str | None) -> ClusterURL:
    """A given client's nodes and ``index`` as a ``ClusterURL``, for messages (never its credentials)."""
    hosts, scheme = [], "http"
    for host in opensearch.transport.hosts or [{}]:
        hosts.append((str(host.get("host", "localhost")), int(host.get("port", 9200))))
        if host.get("use_ssl") or host.get("scheme") == "https" or opensearch.transport.kwargs.get("use_ssl"):
            scheme = "https"
    return ClusterURL.parse(f"{scheme}://{ClusterURL(scheme, tuple(hosts), None).nodes}/{index or ''}",
                            need_index=index is not None)


def _parsed(text):
    """An error answer opensearch-py left as text (it parses only ``application/json`` ones)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return text


def _server_timeout(params: dict) -> float:
    """The seconds of a ``timeout`` parameter OpenSearch waits out itself (e.g. ``60s`` with
    ``wait_for_status``), which a request's patience must outlast; 0 when none."""
    match = _SERVER_TIMEOUT.match(str(params.get("timeout", "")).strip())
    return float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0


def _why(e: NoAnswer, read_timeout: float | None) -> str:
    """A transport error in a few words."""
    if isinstance(e, ConnectionTimeout):
        return f"silent for {read_timeout:g} s" if read_timeout else "silent past the client's timeout"
    cause = str(e.info)
    if isinstance(e, SSLError):
        return f"TLS: {cause[:120]}"
    if "refused" in cause.lower():
        return "connection refused"
    return f"{type(e.info).__name__}: {cause[:120]}"


def _error(status, answer, what: str) -> ClusterError:
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
    status = status if isinstance(status, int) else 0
    if kind == "index_closed_exception":  # its reason is only "closed"
        index = str(error.get("index") or "the index")
        return ClusterError(f"{what}: {index} is closed (OpenSearch answered {status} {kind}), so it can be neither "
                            f"read nor searched; fix: open it (`POST /{index}/_open`), or name an open index",
                            status, kind)
    message = f"{what}: OpenSearch answered {status} {kind}: {reason}"
    fix = (f"check {USER_ENV} and {PASSWORD_ENV} (or the given client's credentials)" if status in (401, 403)
           else "see the cluster's health (`bm25aug cluster status`, or GET _cluster/health)" if status >= 500
           else "see the message; the request was refused as it stands")
    kind_of = ClusterUnavailable if status >= 500 or status == 429 else ClusterError  # 429: its queues are full
    return kind_of(f"{' '.join(message.split())}; fix: {fix}", status, kind)
