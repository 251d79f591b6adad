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
import time
from pathlib import Path

import pytest
from conftest import TINY_DOCS
from test_reliability_five_cluster import ENV, _cli, _files, _jvms, _one_line_error


def ended(process: subprocess.Popen, within_s: float = 10.0) -> bool:
    """Whether ``process`` exits within ``within_s``: ``stop`` sees a node gone once its command line is
    (as it exits), a moment before the process can be reaped, so a bare ``poll()`` right after races it."""
    try:
        process.wait(within_s)
    except subprocess.TimeoutExpired:
        return False
    return True


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
    for root in (outer / "node-2" / "sub", outer / "beside"):
        line = _one_line_error(_cli("start", "--root", str(root), "--nodes", "1", env=env))
        assert f"is inside {outer}, another cluster's folder" in line, line
    line = _one_line_error(_cli("start", "--root", str(inner), env=env))  # its own record pins it there: its choices
    assert f"--root {inner} holds a cluster (its own bm25aug-cluster.json, made before bm25aug refused this) inside " \
        f"{outer}" in line and f"fix: `bm25aug cluster delete --root {inner}` removes it and its data, or leave it " \
        f"stopped (`bm25aug cluster stop --root {inner}`) with its data and start a cluster outside {outer}" in line, \
        line
    assert _files(outer) == before
    assert not list((tmp_path / "cache").glob("opensearch-*"))  # no fetch was tried
    done = _cli("delete", "--root", str(inner), env=env)  # the first choice works
    assert done.returncode == 0 and not (outer / "node-1" / "sub").exists(), done.stdout + done.stderr
    assert _files(outer) == {k: v for k, v in before.items() if not k.startswith("node-1/sub/")}


def _process(argv0, *args) -> subprocess.Popen:
    """A sleeping Python whose command line (/proc/PID/cmdline) reads ``argv0 -c... args``: a node's
    JVM as `launch` starts it (``.../bin/java <options> ClusterNode <home>``), or a program that names one."""
    return subprocess.Popen([str(argv0), "-cimport time; time.sleep(600)", *map(str, args)], executable=sys.executable)


def _ended_all(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_only_a_java_running_cluster_node_is_taken_for_a_node(tmp_path):
    """K10: a process is a node only when it is a program named `java` whose main class is
    `ClusterNode` followed by the home alone; an editor, `strace java ...`, a java running another
    class or with `ClusterNode` as its `-cp` that name `<root>/node-1` are not found as strays, and
    `stop` ends the node and sends them nothing."""
    from bm25aug.opensearch import local
    from bm25aug.opensearch.cluster_folder import folder
    from bm25aug.opensearch.node_processes import alive, strays

    root, java = folder(tmp_path / "root"), tmp_path / "jdk" / "bin" / "java"
    home = root / "node-1"
    others = [_process("vim", "ClusterNode", home), _process("/usr/bin/strace", java, "-cp", "c", "ClusterNode", home),
              _process(java, "Other", "ClusterNode", home), _process(java, "-cp", "ClusterNode", home),
              _process(java, "ClusterNode", home, "more")]
    node = _process(java, "-Xmx1g", "-cp", "c:lib/*", "ClusterNode", home)
    try:
        time.sleep(0.5)
        assert [found["pid"] for found in strays(root, [])] == [node.pid]
        assert not any(alive({"pid": other.pid, "home": str(home)}) for other in others)
        assert local.stop(root) == 1 and ended(node)
        assert all(other.poll() is None for other in others)  # never signalled
    finally:
        _ended_all(others + [node])


def test_a_node_running_inside_a_clusters_folder_keeps_it_from_delete_and_start(tmp_path, monkeypatch):
    """K10: while a node of another cluster (its record gone) runs from inside a node folder of a
    stopped cluster, that cluster's `delete` and `start` refuse in one line naming its pid and home
    and the `stop` that ends it; nothing is removed or signalled. Its `stop` then ends it."""
    from bm25aug.errors import UserError
    from bm25aug.opensearch import local
    from bm25aug.opensearch.cluster_folder import folder

    outer = folder(tmp_path / "outer")
    _stopped_cluster(outer)
    home = outer / "node-1" / "sub" / "node-1"
    (home / "data").mkdir(parents=True)
    (home / "data" / "segment").write_bytes(b"inner")
    monkeypatch.setattr(local, "fetch", lambda version: pytest.fail("fetched"))
    before, node = _files(outer), _process(tmp_path / "jdk" / "bin" / "java", "-cp", "c", "ClusterNode", home)
    try:
        time.sleep(0.5)
        for act in (local.delete, local.start):
            with pytest.raises(UserError) as refused:
                act(root=outer)
            line = str(refused.value)
            assert f"a node of another cluster runs from inside {outer} (pid {node.pid}, home {home})" in line and \
                f"fix: stop it with `bm25aug cluster stop --root {home.parent}`" in line and "\n" not in line, line
        assert _files(outer) == before and node.poll() is None
        assert local.stop(home.parent) == 1 and ended(node) and _files(outer) == before
    finally:
        _ended_all([node])


@pytest.mark.parametrize("later", ["outer", "inner"])
def test_of_two_nested_starts_the_later_is_refused_before_it_writes(tmp_path, monkeypatch, later):
    """K10: two starts, one in the other's node folder, both pass their checks while the (slow)
    fetch runs; the one whose record comes later is refused just before it writes anything (its
    folder is left as the other made it) and launches nothing."""
    from bm25aug.errors import UserError
    from bm25aug.opensearch import local
    from bm25aug.opensearch.cluster_folder import folder

    outer = folder(tmp_path / "outer")
    inner = outer / "node-1" / "sub"
    first, second = (inner, outer) if later == "outer" else (outer, inner)
    monkeypatch.setattr(local, "fetch", lambda version: _stopped_cluster(first) or tmp_path / "build")
    monkeypatch.setattr(local, "java_home", lambda version: tmp_path / "jdk")
    monkeypatch.setattr(local, "_bring_up", lambda *a: pytest.fail("launched"))
    with pytest.raises(UserError) as refused:
        local.start(1, second, heap="512m")
    line = str(refused.value)
    assert (f"holds another cluster's folder, {inner}" if later == "outer" else f"is inside {outer}") in line, line
    made = {"bm25aug-cluster.json", "node-1/data/segment"}
    assert set(_files(outer)) == (made if later == "inner" else {f"node-1/sub/{path}" for path in made})


def test_a_nested_fields_refusal_says_what_is_true_of_every_nested_mapping():
    """U8: the refusal of a field in a nested object says bm25aug does not score it as the
    document's own field, true with `include_in_root`/`include_in_parent` too (where a search does
    reach it), not that every search would find nothing."""
    from bm25aug.errors import UserError
    from bm25aug.opensearch.user_index import field_spec

    for copied in ({}, {"include_in_root": True}, {"include_in_parent": True}):
        mapping = {"properties": {"passages": {"type": "nested", **copied, "properties": {"text": {"type": "text"}}}}}
        with pytest.raises(UserError) as refused:
            field_spec(mapping, "passages.text", "u")
        line = str(refused.value)
        assert "field 'passages.text' is in a nested object ('passages' is of type nested" in line and \
            "whose text bm25aug's BM25 does not score as the document's own field; fix:" in line, line
        assert "find nothing" not in line and "does not reach" not in line


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
    """U8: `?field=passages.text` inside a `nested` object (not a field of the document's own) is
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
