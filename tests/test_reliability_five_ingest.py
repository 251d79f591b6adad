"""`bm25aug index --to URL` killed at any point resumes exactly, and refuses cleanly what is not its
own (probe round five, issue 57: I17, I10, I11, I14-I16, I23), on a real two-node cluster.

A kill is a step of the ingest raising at a chosen point (the cluster keeps what it was sent, as
after a SIGKILL); one case SIGKILLs a real process between a batch's acknowledgement and its
record. The same ingest again must leave exactly the corpus's documents, none deleted, a complete
record, and a clean ingest's hits (ids and scores). Wrong-404 servers are fakes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from conftest import write_beir

pytestmark = pytest.mark.realdata
DOCS, QUERIES, BATCH = 2500, 40, 300  # a SciFact cut: 9 batches of BATCH
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


class Kill(Exception):
    """An ingest stopped here, as a SIGKILL would stop it."""


@pytest.fixture(scope="module")
def small(tmp_path_factory, data_dir):
    """The first DOCS SciFact documents and one blank one (left out, as Anserini leaves it), and
    QUERIES of its test queries; its flat index in our process."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index

    docs = {}
    with open(data_dir / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            docs[row["_id"]] = (row.get("title", ""), row["text"])
            if len(docs) == DOCS:
                break
    docs["blank-1"] = ("", "  ")
    scifact = load_dataset("scifact", data_dir)
    queries = {f"q{i}": text for i, text in enumerate(list(scifact.split("test").queries.values())[:QUERIES])}
    root = tmp_path_factory.mktemp("sfcut")
    dataset = load_dataset(str(write_beir(root / "sfcut", docs, queries)))
    return dataset, ensure_index(dataset, "flat", root / "indexes"), list(queries.values())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from bm25aug.opensearch import local

    root = tmp_path_factory.mktemp("cluster") / "root"
    state = local.start(2, root)
    try:
        yield state
    finally:
        local.delete(root)
        shutil.rmtree(root, ignore_errors=True)  # (delete keeps what it did not write: nothing, here)


@pytest.fixture(scope="module")
def clean(cluster, small):
    """A clean ingest's hits: what every resumed one must give."""
    from bm25aug.opensearch.ingest import ingest

    dataset, _, queries = small
    url = f"{cluster['url']}/clean"
    ingest(dataset, url, bulk_docs=BATCH)
    return _hits(url, queries)


def _client(url):
    from bm25aug.opensearch.client import Client, ClusterURL

    return Client(ClusterURL.parse(url))


def _hits(location, queries) -> list[list[tuple[str, float]]]:
    from bm25aug.search.bm25 import BM25Searcher

    searcher = BM25Searcher(str(location))
    return [[(h.docid, h.score) for h in searcher.search(q, 10)] for q in queries]


def _assert_exact(url, small, clean) -> dict:
    """The index holds the corpus once, nothing deleted, complete, and searches as a clean ingest."""
    from bm25aug.opensearch.schema import record_of

    dataset, _, queries = small
    client, index = _client(url), url.rsplit("/", 1)[1]
    record = record_of(client.request("GET", f"/{index}/_mapping"), index)
    assert record["state"] == "complete" and record["next"] == len(dataset.corpus)
    assert client.request("GET", f"/{index}/_count")["count"] == record["docs"] == DOCS  # the blank one left out
    docs = client.request("GET", f"/{index}/_stats/docs")["_all"]["total"]["docs"]
    assert docs["deleted"] == 0 and docs["count"] == 2 * DOCS  # each document and its replica, once
    assert _hits(url, queries) == clean
    client.request("DELETE", f"/{index}", ok=(404,))
    return record


def _kill_at(monkeypatch, name: str, call: int, before: bool = True, when=None, half: bool = False):
    """Make the ingest's ``name`` raise ``Kill`` on its ``call``-th call (that ``when`` accepts),
    before doing its work or after (``half``: after a bulk of the first half of its documents)."""
    import bm25aug.opensearch.ingest as module

    real, calls = getattr(module, name), []

    def step(*args):
        if when is None or when(*args):
            calls.append(1)
        if len(calls) == call and before:
            raise Kill(name)
        done = real(*args[:2], args[2][:len(args[2]) // 2]) if half and len(calls) == call else real(*args)
        if len(calls) == call:
            raise Kill(name)
        return done

    monkeypatch.setattr(module, name, step)


def _after_request(monkeypatch, ending: str):
    """Killed as the cluster finished the request to a path ending in ``ending`` (its answer lost)."""
    from bm25aug.opensearch.client import Client

    real = Client.request

    def request(self, method, path, *args, **kwargs):
        answer = real(self, method, path, *args, **kwargs)
        if path.endswith(ending):
            raise Kill(ending)
        return answer

    monkeypatch.setattr(Client, "request", request)


KILLS = {
    "before the first batch": lambda mp: _kill_at(mp, "_bulk", 1),
    "mid-bulk": lambda mp: _kill_at(mp, "_bulk", 3, before=False, half=True),
    "a batch acknowledged, before its record (I17)": lambda mp: _kill_at(mp, "_save", 2),
    "a bulk's answer lost (I17)": lambda mp: _kill_at(mp, "_bulk", 4, before=False),
    "after the last record": lambda mp: _kill_at(mp, "_finish", 1),
    "during the final merge": lambda mp: _after_request(mp, "/_forcemerge"),
    "after the settings change, before complete": lambda mp: _kill_at(
        mp, "_save", 1, when=lambda client, index, record: record["state"] == "complete"),
}


@pytest.mark.parametrize("point", list(KILLS))
def test_an_ingest_killed_anywhere_resumes_exactly(cluster, small, clean, monkeypatch, point):
    from bm25aug.opensearch.ingest import ingest

    dataset = small[0]
    url = f"{cluster['url']}/killed-{list(KILLS).index(point)}"
    with monkeypatch.context() as patch:
        KILLS[point](patch)
        with pytest.raises(Kill):
            ingest(dataset, url, bulk_docs=BATCH)
    ingest(dataset, url, bulk_docs=BATCH)  # the same command again
    _assert_exact(url, small, clean)


def test_the_clean_ingest_scores_as_the_folder(small, clean):
    """The reference the resumed ingests are held to is itself the flat folder's ranking."""
    _, flat, queries = small
    ours = _hits(flat, queries)
    assert [[d for d, _ in hits] for hits in ours] == [[d for d, _ in hits] for hits in clean]
    np.testing.assert_allclose([s for hits in ours for _, s in hits], [s for hits in clean for _, s in hits],
                               atol=2e-4)


def test_a_sigkilled_ingest_resumes_through_the_cli(cluster, small, clean):
    """A real SIGKILL between the 2nd batch's acknowledgement and its record; the CLI (1,000
    documents a batch, not the killed run's 300) resumes it."""
    from bm25aug.opensearch.schema import record_of

    dataset = small[0]
    url = f"{cluster['url']}/sigkilled"
    script = ("import os, signal, sys\n"
              "import bm25aug.opensearch.ingest as m\n"
              "from bm25aug.data.registry import load_dataset\n"
              "real, calls = m._save, []\n"
              "def save(client, index, record):\n"
              "    calls.append(1)\n"
              "    if len(calls) == 2:\n"
              "        os.kill(os.getpid(), signal.SIGKILL)\n"
              "    real(client, index, record)\n"
              "m._save = save\n"
              f"m.ingest(load_dataset(sys.argv[1]), sys.argv[2], bulk_docs={BATCH})\n")
    killed = subprocess.run([sys.executable, "-c", script, str(dataset.path), url], env=ENV, capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    record = record_of(_client(url).request("GET", "/sigkilled/_mapping"), "sigkilled")
    assert record["state"] == "ingesting" and record["next"] == BATCH  # the 2nd batch was sent, not recorded
    done = _cli_index(dataset.path, url)
    assert done.returncode == 0 and f"{DOCS} documents" in done.stdout, done.stderr
    _assert_exact(url, small, clean)


def test_deleted_copies_an_older_ingest_left_are_merged_away(cluster, small, clean, monkeypatch):
    """An index a former bm25aug filled with `index` operations, a batch of them sent twice (the
    probe's `mq`): the resume merges the deleted copies away and searches as a clean ingest."""
    from bm25aug.bm25_defaults import FIELD
    from bm25aug.opensearch.ingest import ingest
    from bm25aug.opensearch.schema import ID_FIELD

    dataset = small[0]
    url = f"{cluster['url']}/older"
    with monkeypatch.context() as patch:
        _kill_at(patch, "_bulk", 1)
        with pytest.raises(Kill):
            ingest(dataset, url, bulk_docs=BATCH)
    client = _client(url)
    lines = [line for docid, doc in list(dataset.corpus.items())[:BATCH]
             for line in ({"index": {"_id": docid}}, {FIELD: doc.contents, ID_FIELD: docid})]
    for _ in range(2):
        assert not client.request("POST", "/older/_bulk", lines, ndjson=True)["errors"]
    client.request("POST", "/older/_refresh")
    assert client.request("GET", "/older/_stats/docs")["_all"]["total"]["docs"]["deleted"] == 2 * BATCH
    ingest(dataset, url, bulk_docs=BATCH)
    _assert_exact(url, small, clean)


# ------------------------------------------------------------- I10, I11: a 404 that is not OpenSearch's
class _Loopback(BaseHTTPRequestHandler):
    def send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _serving(handler, **attrs):
    """A fake server on 127.0.0.1 (``attrs`` set on it) for the ``with`` block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.__dict__.update(attrs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class _Fake(_Loopback):
    """Answers every request 404 with ``server.body``, and notes its method and path."""

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append((self.command, self.path))
        self.send(404, self.server.body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer


@pytest.mark.parametrize("body", [b"{}", b"", b'{"weird": true}'])
def test_a_404_that_is_not_opensearch_is_refused_and_nothing_deleted(tiny_beir, body):
    from bm25aug.data.registry import load_dataset
    from bm25aug.errors import UserError
    from bm25aug.opensearch.ingest import ingest

    with _serving(_Fake, body=body, seen=[]) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/x"
        for force in (False, True):
            with pytest.raises(UserError) as refused:
                ingest(load_dataset(str(tiny_beir)), url, force=force)
            message = str(refused.value)
            assert "does not answer as OpenSearch does" in message and "404" in message and "\n" not in message
            assert "fix: point the URL at an OpenSearch node" in message
        cli = _cli_index(tiny_beir, url, "--force")
        assert cli.returncode == 2 and cli.stderr.startswith("error: ") and len(cli.stderr.splitlines()) == 1
        assert "does not answer as OpenSearch does" in cli.stderr
    assert server.seen and {method for method, _ in server.seen} == {"GET"}  # no DELETE, no PUT


# ------------------------------------------------- I23, I14-I16: damaged records, foreign indexes, aliases
def _forge(cluster, name: str, record) -> str:
    from bm25aug.opensearch.schema import index_body

    url = f"{cluster['url']}/{name}"
    _client(url).request("PUT", f"/{name}", index_body(2, 1, record=record))  # made by hand, as with curl
    return url


def _cli_index(folder, url, *flags):
    """``bm25aug index --dataset FOLDER --to URL [flags]``, in a process of its own."""
    return subprocess.run([sys.executable, "-m", "bm25aug.cli", "index", "--dataset", str(folder), "--to", url,
                           *flags], env=ENV, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name,record,held", [
    ("forged-string", "made by hand", "a damaged bm25aug record"),
    ("forged-next", {"state": "ingesting", "next": "abc", "k1": 0.9, "b": 0.4, "docs": 0}, "a damaged bm25aug record"),
    ("forged-far", None, "bm25aug's ingest of sfcut, ingesting"),  # this corpus's, its next past the corpus's end
])
def test_a_damaged_record_is_one_line_and_force_replaces_it(cluster, small, clean, caplog, name, record, held):
    from bm25aug.errors import UserError
    from bm25aug.data.registry import corpus_fingerprint
    from bm25aug.opensearch.ingest import ingest

    dataset = small[0]
    if record is None:
        record = {"dataset": dataset.name, "fingerprint": corpus_fingerprint(dataset), "k1": 0.9, "b": 0.4,
                  "shards": 2, "replicas": 1, "state": "ingesting", "next": 10 ** 9, "docs": 0}
    url = _forge(cluster, name, record)
    with pytest.raises(UserError) as refused:
        ingest(dataset, url, bulk_docs=BATCH)
    assert "damaged" in str(refused.value) and "--force" in str(refused.value) and "\n" not in str(refused.value)
    cli = _cli_index(dataset.path, url)
    assert cli.returncode == 2 and cli.stderr.startswith("error: ") and len(cli.stderr.splitlines()) == 1
    assert "damaged" in cli.stderr
    with caplog.at_level(logging.WARNING, logger="bm25aug.opensearch.ingest"):
        ingest(dataset, url, force=True, bulk_docs=BATCH)
    assert any(name in r.getMessage() and held in r.getMessage() for r in caplog.records)
    _assert_exact(url, small, clean)


def test_a_foreign_index_is_never_deleted_and_force_says_what_it_deletes(cluster, small, caplog):
    """A foreign index is refused with the read-only way to search it, with --force too (nothing of
    it deleted), and a URL with ?field= is never written to; --force over bm25aug's own index says
    whose ingest it deletes."""
    from bm25aug.errors import UserError
    from bm25aug.opensearch.ingest import ingest

    dataset = small[0]
    url = f"{cluster['url']}/precious"
    client = _client(url)
    client.request("PUT", "/precious", {"settings": {"index": {"number_of_replicas": 0}}})
    client.request("PUT", "/precious/_doc/1", {"note": "a user's own"}, params={"refresh": "true"})
    for force in (False, True):
        with pytest.raises(UserError, match=r"is not one bm25aug made; fix: search it as it is, read-only") as refused:
            ingest(dataset, url, force=force, bulk_docs=BATCH)
        assert "--force" not in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(UserError, match=r"\?field= names an index of your own, which bm25aug searches read-only"):
        ingest(dataset, f"{cluster['url']}/other?field=note", bulk_docs=BATCH)
    assert client.request("GET", "/precious/_doc/1")["found"] and client.request("GET", "/precious/_count")["count"] == 1
    assert client.request("GET", "/other", ok=(404,)).get("status") == 404  # (nothing made either)
    client.request("DELETE", "/precious")
    with caplog.at_level(logging.WARNING, logger="bm25aug.opensearch.ingest"):
        ingest(dataset, url, bulk_docs=BATCH)
        ingest(dataset, url, force=True, bulk_docs=BATCH)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("precious" in w and f"bm25aug's ingest of {dataset.name}, complete, {DOCS} documents" in w
               for w in warnings), warnings
    client.request("DELETE", "/precious", ok=(404,))


def test_an_alias_is_refused_with_or_without_force(cluster, small):
    from bm25aug.errors import UserError
    from bm25aug.opensearch.ingest import ingest

    dataset = small[0]
    url = f"{cluster['url']}/myalias"
    client = _client(url)
    client.request("PUT", "/keepme", {"settings": {"index": {"number_of_replicas": 0}}})
    client.request("PUT", "/keepme/_doc/1", {"note": "kept"}, params={"refresh": "true"})
    client.request("POST", "/_aliases", {"actions": [{"add": {"index": "keepme", "alias": "myalias"}}]})
    for force in (False, True):
        with pytest.raises(UserError) as refused:
            ingest(dataset, url, force=force, bulk_docs=BATCH)
        assert "is an alias of keepme" in str(refused.value) and "\n" not in str(refused.value)
    assert client.request("GET", "/keepme/_doc/1")["found"]
    client.request("DELETE", "/keepme", ok=(404,))


# ------------------------------------------------------------- a bulk pushed back: only what is missing again
class _PushBack(_Loopback):
    """A bulk endpoint: on the first request, the 1st document is created, the 2nd is there already
    (409) and the rest are pushed back (429); later requests create all. Notes every request's lines."""

    def do_POST(self):
        lines = [json.loads(line) for line in self.rfile.read(int(self.headers["Content-Length"])).splitlines()]
        self.server.requests.append(lines)
        ids = [line["create"]["_id"] for line in lines[::2]]
        conflict = {"type": "version_conflict_engine_exception", "reason": "document already exists"}
        items = [{"create": {"_id": i, "status": 201}} for i in ids]
        if len(self.server.requests) == 1:
            items[1] = {"create": {"_id": ids[1], "status": 409, "error": conflict}}
            for item in items[2:]:
                item["create"].update(status=429, error={"type": "es_rejected_execution_exception", "reason": "busy"})
        self.send(200, json.dumps({"took": 1, "errors": len(self.server.requests) == 1, "items": items}).encode())


def test_a_bulk_pushed_back_sends_again_only_what_was_not_written():
    from bm25aug.opensearch.ingest import _bulk

    docs = [(f"d{i}", f"text {i}") for i in range(5)]
    with _serving(_PushBack, requests=[]) as server:
        there = _bulk(_client(f"http://127.0.0.1:{server.server_address[1]}/x"), "x", docs)
    first, second = server.requests
    assert first[::2] == [{"create": {"_id": d}} for d, _ in docs]  # create: never a 2nd copy
    assert [line["create"]["_id"] for line in second[::2]] == ["d2", "d3", "d4"]
    assert there == 1  # the 409: there already, counted as written
