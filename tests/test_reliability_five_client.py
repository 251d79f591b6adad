"""The cluster client and ``OpenSearchIndex`` keep their promises under faults (probe round five,
issue 57: O4, O5, O7, O18-O21, O24, I7, I12, I14, I22, S4), through opensearch-py (issue 60): a
client the user built is used as it is, and one retry policy sends again what the cluster pushed
back.

No cluster here: servers this file starts on 127.0.0.1 (one that accepts and never answers, one
that records what it is sent, one that answers odd JSON). The same promises on a real two-node
cluster are in ``test_reliability_five_cluster_index``."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bm25aug.data.registry import load_dataset
from bm25aug.errors import Unavailable, UserError
from opensearchpy import OpenSearch

from bm25aug.opensearch import nodes, retry
from bm25aug.opensearch.client import (CONNECT_TIMEOUT_S, READ_TIMEOUT_S, Client, ClusterError, ClusterUnavailable,
                                       ClusterURL)
from bm25aug.opensearch.index import OpenSearchIndex
from bm25aug.opensearch.ingest import ingest
from bm25aug.search.bm25 import BM25Searcher

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
TIMEOUTS = ("BM25AUG_OPENSEARCH_CONNECT_TIMEOUT", "BM25AUG_OPENSEARCH_READ_TIMEOUT")
URLS = ["http://admin:s3cret/x@127.0.0.1:9200/a", "http://admin:s3cret?x@127.0.0.1:9200/a",
        "http://admin:s3cret@127.0.0.1:9200/a", "https://admin:s3cret#x@127.0.0.1:9200,127.0.0.1:9201/a?stats=local"]


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    """No credentials or timeouts from the caller's environment."""
    for name in TIMEOUTS + ("BM25AUG_OPENSEARCH_USER", "BM25AUG_OPENSEARCH_PASSWORD",
                            "BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH"):
        monkeypatch.delenv(name, raising=False)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as OpenSearch

    def _answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        answer = self.server.answer(self.command, self.path, body)
        if answer is None:  # silent: the connection held open, never answered
            self.server.stop.wait()
            self.close_connection = True
            return
        self.send_response(answer[0])
        self.send_header("Content-Length", str(len(answer[1])))
        self.end_headers()
        self.wfile.write(answer[1])

    do_GET = do_PUT = do_POST = do_DELETE = _answer
    log_message = lambda self, *args: None  # noqa: E731


@pytest.fixture
def fakes():
    """``fakes(answer)``: a server on 127.0.0.1 whose ``answer(method, path, body)`` gives
    ``(status, bytes)``, or None to stay silent; ``.seen`` holds each request, ``.port`` its port."""
    made = []

    def make(answer=lambda *request: None):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads, server.answer, server.seen, server.stop = True, answer, [], threading.Event()
        server.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop.set()
        server.shutdown()
        server.server_close()


def _json(status=200, body=b"{}"):
    return lambda *request: (status, body)


def _free_port() -> int:
    """A port nobody listens on (the system's pick, closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _client(url, **options):
    return Client(ClusterURL.parse(url, need_index=False), **options)


def _timed(call):
    start = time.monotonic()
    return call(), time.monotonic() - start


def _one_line(error, *parts):
    message = str(error)
    assert "\n" not in message and "fix:" in message and all(p in message for p in parts), message
    return message


# ------------------------------------------------------------ O20, O21, I12: a node that never answers
def test_a_silent_node_costs_one_read_timeout_then_is_asked_last(fakes, caplog, monkeypatch):
    """The first request waits one read timeout on the silent node (the default's is well under
    30 s; 2 s here), and a warning names it; later ones do not wait on it, also once its probe is
    due (it runs aside, and fails: the node stays at the back). Real work never goes to it again."""
    assert READ_TIMEOUT_S + CONNECT_TIMEOUT_S < 30
    monkeypatch.setattr(nodes, "PROBE_AFTER_S", 1.0)
    monkeypatch.setenv("BM25AUG_OPENSEARCH_READ_TIMEOUT", "2")
    silent, answering = fakes(), fakes(_json(body=b'{"path": "/x"}'))
    client = _client(f"http://127.0.0.1:{silent.port},127.0.0.1:{answering.port}")
    with caplog.at_level(logging.WARNING, logger="bm25aug.opensearch"):
        answer, first = _timed(lambda: client.request("GET", "/x"))
    assert answer == {"path": "/x"} and 2 <= first < 2 + 3
    warned = [r.getMessage() for r in caplog.records if f"127.0.0.1:{silent.port}" in r.getMessage()]
    assert len(warned) == 1 and "did not answer" in warned[0]
    assert [(m, p) for m, p, _ in silent.seen] == [("GET", "/x")]
    assert all(_timed(lambda: client.request("GET", "/x"))[1] < 1 for _ in range(3)) and len(silent.seen) == 1
    time.sleep(1.2)  # the next probe is due: the next request starts it and does not wait for it
    assert _timed(lambda: client.request("GET", "/x"))[1] < 1
    deadline = time.monotonic() + CONNECT_TIMEOUT_S + 5
    while len(silent.seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [(m, p) for m, p, _ in silent.seen][1:] == [("GET", nodes.PROBE)]  # a probe, never real work
    time.sleep(2 * CONNECT_TIMEOUT_S + 0.5)  # (a probe's connect and read timeouts)
    assert client.failing() == [f"127.0.0.1:{silent.port}"]  # its probe timed out: still at the back


def test_a_node_that_answers_a_probe_is_asked_first_again(fakes, monkeypatch):
    monkeypatch.setattr(nodes, "PROBE_AFTER_S", 0.2)
    monkeypatch.setenv("BM25AUG_OPENSEARCH_READ_TIMEOUT", "1")
    awake = threading.Event()
    first, second = fakes(lambda *request: (200, b'{"node": 1}') if awake.is_set() else None), fakes(
        _json(body=b'{"node": 2}'))
    client = _client(f"http://127.0.0.1:{first.port},127.0.0.1:{second.port}")
    assert client.request("GET", "/")["node"] == 2
    awake.set()
    deadline = time.monotonic() + 10
    while client.failing() and time.monotonic() < deadline:
        assert client.request("GET", "/")["node"] == 2  # never real work to the failing node
        time.sleep(0.1)
    assert client.request("GET", "/")["node"] == 1
    assert [p for _, p, _ in first.seen][1:2] == [nodes.PROBE]  # the probe brought it back


def test_timeouts_come_from_the_environment_and_are_checked(monkeypatch):
    url = "http://127.0.0.1:9"
    assert (_client(url).connect_timeout, _client(url).timeout) == (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)
    monkeypatch.setenv("BM25AUG_OPENSEARCH_CONNECT_TIMEOUT", "2.5")
    monkeypatch.setenv("BM25AUG_OPENSEARCH_READ_TIMEOUT", "7")
    assert (_client(url).connect_timeout, _client(url).timeout, _client(url, timeout=3).timeout) == (2.5, 7.0, 3.0)
    timeout = _client(url).opensearch.transport.connection_pool.connection.timeout  # what urllib3 is given
    assert (timeout.connect_timeout, timeout.read_timeout) == (2.5, 7.0)
    for variable in TIMEOUTS:
        for bad in ("abc", "0", "-1", "inf", "nan"):
            monkeypatch.setenv(variable, bad)
            with pytest.raises(UserError) as refused:
                _client(url)
            assert _one_line(refused.value).startswith(f"{variable}={bad!r} is not a number of seconds above 0")
        monkeypatch.delenv(variable)


def test_a_request_that_asks_the_cluster_to_wait_outlasts_the_read_timeout(fakes, monkeypatch):
    """Silent past the read timeout: failed, one line. A request that asks OpenSearch to wait (a
    health call's ``timeout``, sent to it as is) or gives its own patience is waited for."""
    monkeypatch.setenv("BM25AUG_OPENSEARCH_READ_TIMEOUT", "0.5")
    busy = fakes(lambda method, path, body: time.sleep(2) or (200, b'{"status": "green"}'))
    client = _client(f"http://127.0.0.1:{busy.port}")
    with pytest.raises(Unavailable) as silent:
        client.request("GET", "/_cluster/health/x")
    _one_line(silent.value, "no node of the cluster answered GET /_cluster/health/x", "silent for 0.5 s")
    assert client.request("GET", "/_cluster/health/x", params={"timeout": "3s"}) == {"status": "green"}
    assert busy.seen[-1][1] == "/_cluster/health/x?timeout=3s"  # OpenSearch's parameter, sent
    assert client.request("GET", "/_cluster/health/x", timeout=5) == {"status": "green"}


# ----------------------------------------------------------------- O18: an outage is not the caller's fault
def test_no_node_answering_is_unavailable(fakes):
    closed = [_free_port(), _free_port()]
    url = f"http://127.0.0.1:{closed[0]},127.0.0.1:{closed[1]}/x"
    for call in (lambda: _client(url).request("GET", "/x/_search"), lambda: BM25Searcher(url)):
        with pytest.raises(ClusterUnavailable) as down:
            call()
        assert isinstance(down.value, Unavailable) and down.value.retry_after > 0
        _one_line(down.value, "no node of the cluster answered", *map(str, closed), "connection refused")
    busy = fakes(_json(503, b'{"error": {"type": "cluster_manager_not_discovered_exception", "reason": "no"}}'))
    with pytest.raises(ClusterUnavailable, match="cluster_manager_not_discovered_exception") as failing:
        _client(f"http://127.0.0.1:{busy.port}").request("GET", "/x")
    assert failing.value.status == 503
    refused = fakes(_json(400, b'{"error": {"type": "parsing_exception", "reason": "bad"}}'))
    with pytest.raises(ClusterError) as bad:
        _client(f"http://127.0.0.1:{refused.port}").request("GET", "/x")
    assert not isinstance(bad.value, Unavailable)  # the request itself was refused: the caller's to fix


# ------------------------------------------------- O24, I7: credentials over plain http, or in the URL
def test_credentials_are_not_sent_over_http_unless_allowed(fakes, monkeypatch, caplog):
    recorder = fakes(_json())
    url = f"http://127.0.0.1:{recorder.port}"
    assert _client(url).request("GET", "/") == {} and "authorization" not in recorder.seen[-1][2]
    monkeypatch.setenv("BM25AUG_OPENSEARCH_USER", "probeuser")
    monkeypatch.setenv("BM25AUG_OPENSEARCH_PASSWORD", "Sekr3tPW!x")
    for call in (lambda: _client(url), lambda: BM25Searcher(f"{url}/x")):
        with pytest.raises(UserError) as refused:
            call()
        message = _one_line(refused.value, "plain HTTP", "BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH=1", "https://")
        assert "Sekr3tPW" not in message
    assert len(recorder.seen) == 1  # nothing more reached the node
    monkeypatch.setenv("BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH", "1")
    with caplog.at_level(logging.WARNING, logger="bm25aug.opensearch"):
        for _ in range(2):
            _client(url).request("GET", "/")
    token = base64.b64encode(b"probeuser:Sekr3tPW!x").decode()
    assert [headers.get("authorization") for _, _, headers in recorder.seen[1:]] == [f"Basic {token}"] * 2
    warned = [r.getMessage() for r in caplog.records if "in clear" in r.getMessage()]
    assert len(warned) == 1 and f"127.0.0.1:{recorder.port}" in warned[0] and "Sekr3tPW" not in warned[0]
    monkeypatch.delenv("BM25AUG_OPENSEARCH_ALLOW_HTTP_AUTH")
    pool = _client(f"https://127.0.0.1:{recorder.port}").opensearch.transport.connection_pool
    assert [c.headers.get("authorization") for c in pool.connections] == [f"Basic {token}"]


@pytest.mark.parametrize("url", URLS)
def test_a_url_with_credentials_is_refused_without_echoing_it(url, tiny_beir):
    for call in (lambda: ClusterURL.parse(url), lambda: BM25Searcher(url), lambda: BM25Searcher(url, flavor="wp"),
                 lambda: ingest(load_dataset(str(tiny_beir)), url)):
        with pytest.raises(UserError) as refused:
            call()
        message = _one_line(refused.value, "must not hold credentials", "BM25AUG_OPENSEARCH_USER")
        assert "s3cret" not in message and "admin" not in message
    if url == URLS[0]:
        done = subprocess.run([sys.executable, "-m", "bm25aug.cli", "search", "--index", url, "--query", "cancer"],
                              env=ENV, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
        assert "must not hold credentials" in done.stderr and "s3cret" not in done.stderr + done.stdout


# ------------------------------------------ I22: what opening reads, damaged or not shaped as OpenSearch's
RECORD = {"dataset": "tiny", "fingerprint": "f", "k1": 0.9, "b": 0.4, "shards": 2, "replicas": 1,
          "state": "complete", "next": 8, "docs": 8}


@pytest.mark.parametrize("case,expected", [
    ({"mappings": {"_meta": {"bm25aug": {**RECORD, "k1": "abc"}}}}, "damaged ('k1' is 'abc')"),
    ({"mappings": {"_meta": {"bm25aug": "made by hand"}}}, "damaged (it is not an object)"),
    ({"mappings": {"_meta": {"bm25aug": RECORD}, "properties": "odd"}}, "older bm25aug"),
    ({"settings": {}}, "answer to GET /x is not shaped as OpenSearch 2.x or 3.x answers (KeyError"),
    ({"settings": {"index": {"uuid": "u1", "max_result_window": "a"}}}, "GET /x is not shaped as OpenSearch 2"),
    ({"/x/_count": b'{"count": "many"}'}, "answer to GET /x/_count is not shaped"),
    ({"/_nodes/settings": b'{"nodes": {"n": {"settings": {"indices.query.bool.max_clause_count": "a"}}}}'},
     "answer to GET /_nodes/settings is not shaped"),
    ({"/x": b"[1, 2]"}, "is not a JSON object"),
])
def test_what_opening_reads_is_one_line_whatever_its_shape(fakes, case, expected):
    """A fake node answers what opening index ``x`` asks: a sound answer but for ``case``."""
    entry = {"mappings": {"_meta": {"bm25aug": RECORD}, "properties": {"contents": {}, "id": {}}},
             "settings": {"index": {"uuid": "u1"}}}
    entry.update({k: v for k, v in case.items() if not k.startswith("/")})
    answers = {"/x": json.dumps({"x": entry}).encode(), "/x/_count": b'{"count": 8}', "/_nodes/settings": b"{}",
               "/x/_search": b'{"hits": {"hits": []}}', **{k: v for k, v in case.items() if k.startswith("/")}}
    node = fakes(lambda method, path, body: (200, answers.get(path.split("?")[0], b"{}")))
    with pytest.raises(UserError) as refused:
        BM25Searcher(f"http://127.0.0.1:{node.port}/x")
    _one_line(refused.value, expected)


# -------------------------------------------------- issue 60: a client the user built, one retry policy
def _opening(record=RECORD):
    """A fake node's answers to what opening index ``x`` asks, and to a search with no hits."""
    entry = {"mappings": {"_meta": {"bm25aug": record}, "properties": {"contents": {}, "id": {}}},
             "settings": {"index": {"uuid": "u1"}}}
    answers = {"/x": json.dumps({"x": entry}).encode(), "/x/_count": b'{"count": 8}', "/_nodes/settings": b"{}",
               "/x/_search": b'{"hits": {"hits": []}}', "/_cluster/settings": b"{}"}
    return lambda method, path, body: (200, answers.get(path.split("?")[0], b"{}"))


def test_a_client_the_user_built_is_used_as_it_is(fakes, monkeypatch):
    """Its own header, auth (over http: the user's choice, not refused) and timeout reach every
    request; bm25aug's environment credentials are not sent; closing the index leaves it open."""
    monkeypatch.setenv("BM25AUG_OPENSEARCH_USER", "ours")  # would be refused over http:// for a URL
    node = fakes(_opening())
    theirs = OpenSearch(hosts=[{"host": "127.0.0.1", "port": node.port}], http_auth=("team", "pw"),
                        headers={"x-team": "search"}, timeout=7)
    index = OpenSearchIndex.from_client(theirs, "x")
    assert index.num_docs == 8 and str(index) == f"http://127.0.0.1:{node.port}/x"
    assert index.search(index.analyzed_query("zebra"), 10).lucene_ids.size == 0
    token = base64.b64encode(b"team:pw").decode()
    assert len(node.seen) >= 5 and all(h.get("x-team") == "search" and h.get("authorization") == f"Basic {token}"
                                       for _, _, h in node.seen)
    index.close()
    assert theirs.transport.perform_request("GET", "/x/_count") == {"count": 8}  # still open
    local = OpenSearchIndex.from_client(theirs, "x?stats=local")
    local.search(local.analyzed_query("zebra"), 10)
    assert "search_type=query_then_fetch" in [p for _, p, _ in node.seen if p.startswith("/x/_search?")][-1]
    for bad, expected in (("Bad", "is not an index name"), ("x?stats=odd", "stats=exact (default) or stats=local")):
        with pytest.raises(UserError, match=re.escape(expected)):
            OpenSearchIndex.from_client(theirs, bad)
    with pytest.raises(UserError, match="pass an opensearchpy.OpenSearch client"):
        OpenSearchIndex.from_client(object(), "x")


def test_the_search_request_is_what_is_sent(fakes):
    node = fakes(_opening())
    index = OpenSearchIndex(f"http://127.0.0.1:{node.port}/x")
    request = index.search_request([("zebra", 2.0)], 10)
    assert (request.method, request.path) == ("POST", "/x/_search")
    assert request.params["search_type"] == "dfs_query_then_fetch"
    assert request.params["allow_partial_search_results"] == "false"
    assert request.body["size"] == 8 and request.body["query"]["bool"]["should"] == [
        {"term": {"contents": {"value": "zebra", "boost": 2.0}}}]
    seen = len(node.seen)
    index.search([("zebra", 2.0)], 10)
    method, path, _ = node.seen[seen]
    assert (method, path.split("?")[0]) == ("POST", "/x/_search") and "search_type=dfs_query_then_fetch" in path


def test_one_retry_policy_sends_again_what_the_cluster_pushed_back(fakes, monkeypatch):
    """A search answered 503 twice is answered on the third try, after the policy's backoff; a 400
    is not sent again; past ``RETRIES`` the last error, an ``Unavailable``."""
    monkeypatch.setattr(retry, "BACKOFF_S", 0.2)
    opening, searches = _opening(), []

    def answer(method, path, body):
        if path.startswith("/x/_search") and b"explain" not in body and b"_source" not in body:
            searches.append(time.monotonic())
            if len(searches) <= 2:
                return 503, b'{"error": {"type": "search_phase_execution_exception", "reason": "shard lost"}}'
        return opening(method, path, body)

    index = OpenSearchIndex(f"http://127.0.0.1:{fakes(answer).port}/x")
    assert index.search([("zebra", 1.0)], 10).lucene_ids.size == 0 and len(searches) == 3
    assert searches[1] - searches[0] >= 0.2 and searches[2] - searches[1] >= 0.4  # backing off
    refused = fakes(_json(400, b'{"error": {"type": "parsing_exception", "reason": "bad"}}'))
    calls = []
    with pytest.raises(ClusterError):
        retry.retrying(lambda: calls.append(1) or _client(f"http://127.0.0.1:{refused.port}").request("GET", "/"))
    assert len(calls) == 1
    monkeypatch.setattr(retry, "BACKOFF_MAX_S", 0.2)
    down, calls = fakes(_json(503, b'{"error": {"type": "x", "reason": "down"}}')), []
    with pytest.raises(ClusterUnavailable):
        retry.retrying(lambda: calls.append(1) or _client(f"http://127.0.0.1:{down.port}").request("GET", "/"))
    assert len(calls) == retry.RETRIES + 1


def test_an_msearch_answered_short_is_one_line_never_fewer_hits(fakes):
    """A server that answers an ``_msearch`` of two searches with one answer: an error naming it,
    for batch search and document counts alike; never a query left without hits in silence."""
    opening = _opening()
    one = b'{"responses": [{"took": 1, "_shards": {"total": 1, "successful": 1}, "hits": {"hits": []}}]}'
    node = fakes(lambda method, path, body: (200, one) if path.startswith("/_msearch") else opening(method, path, body))
    index = OpenSearchIndex(f"http://127.0.0.1:{node.port}/x")
    for call in (lambda: index.search_many([[("zebra", 1.0)], [("lion", 1.0)]], 10),
                 lambda: index.doc_freqs(["zebra", "lion"])):
        with pytest.raises(UserError) as short:
            call()
        _one_line(short.value, "answered an _msearch of 2 searches with 1 answers")
    assert len(index.search_many([[("zebra", 1.0)]], 10)) == 1  # one search, one answer: fine
