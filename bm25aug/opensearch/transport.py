"""The ``opensearchpy.OpenSearch`` client bm25aug builds for a cluster URL (``connect``): every
request of it goes through opensearch-py's ``Transport``, with these settings.

* **Timeouts** of seconds (urllib3's): ``CONNECT_TIMEOUT_S`` to open a connection (with its TLS
  handshake; also a probe's wait), ``BM25AUG_OPENSEARCH_CONNECT_TIMEOUT``; ``READ_TIMEOUT_S``, the
  longest a node may stay silent (no byte of its answer), ``BM25AUG_OPENSEARCH_READ_TIMEOUT``. A
  request that asks OpenSearch to wait (a ``timeout`` parameter, e.g. a health call's
  ``wait_for_status``) or a long operation's own (``Client.request(timeout=...)``, a force merge)
  waits that long instead. A node that stays silent past its timeout is failed, not waited for:
  a request the cluster needs longer for than the read timeout needs a larger one.
* **Failover** (opensearch-py's): a node that refuses, drops the connection or stays silent is
  marked dead and the request goes to the next node of the URL (``max_retries``: each node once;
  ``retry_on_timeout``); which node first is ``nodes.ProbedPool`` (the URL's order, a failed node
  last until it answers a probe). Answers that say the cluster cannot serve now are not retried
  here (``retry_on_status`` empty) but by ``bm25aug.opensearch.retry``, with a backoff.
* **Credentials** never in the URL (``client.ClusterURL`` refuses them): ``BM25AUG_OPENSEARCH_USER``
  and ``BM25AUG_OPENSEARCH_PASSWORD`` give HTTP basic auth, sent only over ``https://`` (over
  ``http://`` refused unless ``BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH=1``, then with a warning);
  ``BM25AUG_OPENSEARCH_CA`` a CA bundle to check the nodes' certificates with (else the system's).
* **Logging.** opensearch-py logs each failed request as a warning with its traceback; a failed
  request of this client is an error naming it (``client.Client``), so those are at debug level.

A client the user built is used as it is (``client.Client.given``): its own settings hold.
"""

from __future__ import annotations

import logging
import math
import os
import ssl

import urllib3
from opensearchpy import OpenSearch, Urllib3HttpConnection

from bm25aug.errors import UserError
from bm25aug.opensearch.nodes import ProbedPool

CONNECT_TIMEOUT_S = 5.0  # to open a connection (and a TLS handshake); also a probe's whole wait
READ_TIMEOUT_S = 20.0  # the longest a node may stay silent before it is failed
POOL_SIZE = 16  # open connections kept per node: a batch's threads each reuse one (urllib3's default keeps 1)
CONNECT_ENV, READ_ENV = "BM25AUG_OPENSEARCH_CONNECT_TIMEOUT", "BM25AUG_OPENSEARCH_READ_TIMEOUT"
USER_ENV, PASSWORD_ENV = "BM25AUG_OPENSEARCH_USER", "BM25AUG_OPENSEARCH_PASSWORD"
ALLOW_HTTP_AUTH_ENV = "BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH"  # "1": send credentials over http:// too
CA_ENV = "BM25AUG_OPENSEARCH_CA"
log = logging.getLogger(__name__)
_warned_http_auth: set[str] = set()  # the node lists warned about credentials over http://, once each


class QuietConnection(Urllib3HttpConnection):
    """opensearch-py's urllib3 connection, its failed requests logged at debug level (the
    caller's error names them)."""

    def log_request_fail(self, method, full_url, path, body, duration, status_code=None, response=None,
                         exception=None) -> None:
        log.debug("%s %s [status:%s request:%.3fs] %s", method, full_url, status_code or "N/A", duration,
                  exception or "")


def connect(url, read_timeout: float, connect_timeout: float, credentials: bool = True) -> OpenSearch:
    """The client of ``url`` (a ``client.ClusterURL``) with the settings above."""
    https = url.scheme == "https"
    return OpenSearch(
        hosts=[{"host": host, "port": port} for host, port in url.hosts], use_ssl=https,
        ssl_context=_tls_context() if https else None, http_auth=_auth(url) if credentials else None,
        timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout), connection_class=QuietConnection,
        connection_pool_class=ProbedPool, pool_maxsize=POOL_SIZE, max_retries=len(url.hosts) - 1, retry_on_timeout=True, retry_on_status=())


def timeout(given, variable: str, default: float) -> float:
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


def _auth(url) -> tuple[str, str] | None:
    """HTTP basic auth from the environment: over ``https://``; over ``http://`` refused unless
    ``BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH=1`` says so (then a warning, once per node list)."""
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if not user:
        return None
    if url.scheme != "https":
        if os.environ.get(ALLOW_HTTP_AUTH_ENV, "").strip() != "1":
            raise UserError(f"{USER_ENV} is set, and {url.scheme}://{url.nodes} is plain HTTP, which would send the "
                            f"password in clear to every node; fix: use the nodes' https:// address, or set "
                            f"{ALLOW_HTTP_AUTH_ENV}=1 if no one else can read that network, or unset {USER_ENV}")
        if url.nodes not in _warned_http_auth:
            _warned_http_auth.add(url.nodes)
            log.warning("sending %s's credentials in clear over http:// to %s (%s=1)", USER_ENV, url.nodes,
                        ALLOW_HTTP_AUTH_ENV)
    return user, password or ""


def _tls_context() -> ssl.SSLContext:
    ca = os.environ.get(CA_ENV)
    if ca and not os.path.isfile(ca):
        raise UserError(f"{CA_ENV}={ca!r} is not a file; fix: point it at the cluster's CA bundle (PEM)")
    return ssl.create_default_context(cafile=ca or None)
