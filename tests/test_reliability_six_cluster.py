"""Probe round 6 on the cluster path (issue 65, items 1, 2 and 6): one cluster's folder never holds
another's, and a node whose record is gone is still found and stopped by its process (K10); a
user's index searched through a field inside a `nested` object is refused, not answered with no
hits (U8); a closed index and an alias get a line that says so, with the fix (U11, U12). The
folder checks need no JVM; the rest share one 1-node cluster, whose node is stopped last."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_DOCS
from test_reliability_five_cluster import ENV, _cli, _files, _jvms, _one_line_error


def _record(root: Path, pid: int = 0) -> dict:
    """A record of a 1-node cluster in ``root`` (not running when ``pid`` is 0), as bm25aug writes it."""
    return {"bm25aug_cluster": 1, "root": str(root), "url": "http://127.0.0.1:9201", "java": "/usr", "build": "/b",
            "heap": "512m", "nodes": [{"name": "node-1", "http": 9201, "transport": 9301,
                                       "home": str(root / "node-1"), "pid": pid}]}


def _stopped_cluster(root: Path) -> None:
    """A stopped cluster's folder: its record and node-1's data."""
    (root / "node-1" / "data").mkdir(parents=True)
    (root / "node-1" / "data" / "segment").write_bytes(b"x")
    (root / "bm25aug-cluster.json").write_text(json.dumps(_record(root)))


def test_a_clusters_folder_never_holds_another(tmp_path):
    """K10: `delete` and `start` of a cluster whose node folder holds another cluster's folder (made
    by an older bm25aug) refuse, and so does `start` of a root inside a cluster's folder (in a node's
    folder, or beside them), each before it fetches anything (no Maven here, an empty cache); every
    file stays byte for byte."""
    from bm25aug.opensearch.cluster_folder import folder

    outer = folder(tmp_path / "outer")
    _stopped_cluster(outer)
    (tmp_path / "nomvn").mkdir()
    env = {**ENV, "PATH": str(tmp_path / "nomvn"), "BM25AUG_CACHE": str(tmp_path / "cache")}
    inner = outer / "node-1" / "sub"
    _stopped_cluster(inner)
    before = _files(outer)
    line = _one_line_error(_cli("delete", "--root", str(outer), env=env))
    assert f"holds another cluster's folder, {inner}" in line and "nothing was stopped or removed" in line, line
    line = _one_line_error(_cli("start", "--root", str(outer), env=env))
    assert f"holds another cluster's folder, {inner}" in line, line
    for root in (inner, outer / "node-2" / "sub", outer / "beside"):
        line = _one_line_error(_cli("start", "--root", str(root), "--nodes", "1", env=env))
        assert f"is inside {outer}, another cluster's folder" in line, line
    assert _files(outer) == before
    assert not list((tmp_path / "cache").glob("opensearch-*"))  # no fetch was tried


# ------------------------------------------------------------------------------- on a real cluster
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 1-node cluster holding the user's indexes of the probe, made with opensearch-py: ``u_obj``
    (``doc.body``, in a plain object), ``u_nested`` (``passages.text``, in a nested object),
    ``u_eng`` with its alias ``ua``, and ``u_closed``. At the end no node runs and its folder is gone."""
    from opensearchpy import OpenSearch, helpers

    from bm25aug.opensearch import local

    root = tmp_path_factory.mktemp("cluster6") / "root"
    state = local.start(1, root, heap="512m")
    try:
        client = OpenSearch(hosts=[{"host": "127.0.0.1", "port": state["nodes"][0]["http"]}], timeout=120)
        english = {"type": "text", "analyzer": "english"}
        shapes = {"u_obj": ({"doc": {"properties": {"body": english}}}, lambda text: {"doc": {"body": text}}),
                  "u_nested": ({"passages": {"type": "nested", "properties": {"text": english}}},
                               lambda text: {"passages": [{"text": text}]}),
                  "u_eng": ({"body": english}, lambda text: {"body": text}),
                  "u_closed": ({"body": english}, lambda text: {"body": text})}
        for name, (properties, source) in shapes.items():
            client.indices.create(index=name, body={"settings": {"number_of_shards": 1, "number_of_replicas": 0},
                                                    "mappings": {"properties": properties}})
            helpers.bulk(client, ({"_index": name, "_id": docid, "_source": source(f"{title} {text}")}
                                  for docid, (title, text) in TINY_DOCS.items()), refresh=True)
        client.indices.put_alias(index="u_eng", name="ua")
        client.indices.close(index="u_closed")
        yield state, root, client
    finally:
        try:
            local.delete(root)
        finally:
            left = _jvms(root)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        assert not root.exists() and left == []


def _opened(state: dict, spec: str):
    from bm25aug.opensearch.index import OpenSearchIndex

    return OpenSearchIndex(f"{state['url']}/{spec}", k1=1.2, b=0.75)


@pytest.mark.realdata
def test_a_field_in_a_nested_object_is_refused_and_one_in_a_plain_object_works(cluster):
    """U8: `?field=passages.text` inside a `nested` object (every search of it finds nothing) is
    refused in one line, by URL, through the user's own client and on the command line; a field in
    a plain object (`doc.body`) is searched as before."""
    from bm25aug.errors import UserError
    from bm25aug.opensearch.index import OpenSearchIndex
    from bm25aug.search.bm25 import BM25Searcher

    state, _, client = cluster
    with pytest.raises(UserError, match=r"field 'passages.text' is in a nested object \('passages' is of type nested"):
        _opened(state, "u_nested?field=passages.text")
    with pytest.raises(UserError, match="in a nested object") as refused:
        OpenSearchIndex.from_client(client, "u_nested?field=passages.text", k1=1.2, b=0.75)
    assert "\n" not in str(refused.value) and "fix: index the corpus with `bm25aug index" in str(refused.value)
    done = subprocess.run([sys.executable, "-m", "bm25aug.cli", "search", "--index",
                           f"{state['url']}/u_nested?field=passages.text", "--k1", "1.2", "--b", "0.75", "--query",
                           "cat on a mat", "--k", "3"], capture_output=True, text=True, env=ENV, timeout=300)
    assert "in a nested object" in _one_line_error(done) and done.stdout == ""
    index = _opened(state, "u_obj?field=doc.body")
    try:
        hits = BM25Searcher(index, 1.2, 0.75).search("cat on a mat", 3)
        assert hits and hits[0].docid == "d1"
    finally:
        index.close()


@pytest.mark.realdata
def test_a_closed_index_says_it_is_closed(cluster):
    """U11: a closed index says it is closed and how to open it (not `fix: see the message`)."""
    from bm25aug.errors import UserError

    with pytest.raises(UserError) as closed:
        _opened(cluster[0], "u_closed?field=body")
    line = str(closed.value)
    assert "u_closed is closed" in line and "fix: open it (`POST /u_closed/_open`)" in line and "\n" not in line, line


@pytest.mark.realdata
def test_an_alias_says_which_index_it_names(cluster):
    """U12: an alias (with `?field=` or without) says which index it is an alias of, not that the
    cluster's answer is misshapen."""
    from bm25aug.errors import UserError

    for spec in ("ua?field=body", "ua"):
        with pytest.raises(UserError) as alias:
            _opened(cluster[0], spec)
        line = str(alias.value)
        assert "ua on the cluster is an alias of u_eng, not an index; fix: name an index" in line, line
        assert "not shaped" not in line and "\n" not in line


@pytest.mark.realdata
def test_a_node_whose_record_is_gone_is_found_and_stopped(cluster, tmp_path):
    """K10: with the cluster's record gone (moved away), its running node is still found by its
    process: `status` names it and its pid, `start` refuses to start a second node on its data, and
    `stop` ends it, removing nothing; with a record that lists it as stopped, `status` names it as
    running outside the record. Last on the shared cluster: its node stays stopped."""
    _, root, _ = cluster
    (pid,) = _jvms(root)
    record, aside = root / "bm25aug-cluster.json", tmp_path / "bm25aug-cluster.json"
    record.rename(aside)
    try:
        before = _files(root / "node-1" / "config")
        line = _one_line_error(_cli("status", "--root", str(root)))
        assert f"no cluster record in {root}, but nodes of a cluster run from it (node-1 (pid {pid}))" in line, line
        line = _one_line_error(_cli("start", "--root", str(root)))
        assert f"without its record holding them (node-1 (pid {pid}))" in line and _jvms(root) == [pid], line
        rewritten = json.loads(aside.read_text())
        rewritten["nodes"][0]["pid"] = 0
        record.write_text(json.dumps(rewritten))
        shown = _cli("status", "--root", str(root)).stdout
        assert f"node-1: running without being in the record (pid {pid}; " in shown and "node-1: stopped" in shown
        record.unlink()
        done = _cli("stop", "--root", str(root))
        assert done.returncode == 0 and f"stopped 1 nodes that ran from {root} with no cluster record there (node-1 " \
            f"(pid {pid}))" in done.stdout, done.stdout + done.stderr
        assert _jvms(root) == [] and _files(root / "node-1" / "config") == before
        assert "is not a cluster this command started" in _one_line_error(_cli("stop", "--root", str(root)))
    finally:
        aside.rename(record)
