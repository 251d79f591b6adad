"""`bm25aug cluster` and the folders it works in (probe round 5: K5, K7, K8, K9, K14, O26; issue 60
item 1). A folder is a cluster only with bm25aug's record: any other is refused in one line and left
byte for byte; `stop` keeps the data and `start` brings the same cluster back, or just its nodes that
are down; `delete` removes what the cluster wrote and nothing else; a failed start says why; the nodes
answer only loopback Host and Origin headers. The real-cluster tests share one 2-node cluster."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
FOREIGN_STATE = {  # what someone else's cluster.json may hold: none is bm25aug's record
    "not-json": "not json {",
    "other-keys": '{"cluster": "prod"}',
    "names": '{"nodes": ["web-1", "web-2"]}',
    "hosts": '{"nodes": [{"name": "web-1", "host": "10.0.0.5"}]}',
    "no-nodes": '{"nodes": []}',
}


def _cli(*args, env=None, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bm25aug.cli", "cluster", *args], capture_output=True, text=True,
                          env=env or ENV, timeout=timeout)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _jvms(root: Path) -> list[int]:
    """The pids of ClusterNode JVMs whose node home is inside ``root``."""
    inside, pids = f"{root}/".encode(), []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if b"ClusterNode" in command and any(arg.startswith(inside) for arg in command):
            pids.append(int(entry.name))
    return pids


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "fix:" in lines[0], \
        (done.returncode, done.stdout, done.stderr)
    return lines[0]


def _forged_records(root: Path) -> dict[str, dict]:
    """bm25aug-cluster.json files bm25aug did not write for ``root``."""
    node = {"name": "node-1", "http": 9200, "transport": 9300, "home": str(root / "node-1"), "pid": 0}
    good = {"bm25aug_cluster": 1, "root": str(root), "url": "http://127.0.0.1:9200", "java": "/usr", "build": "/b",
            "heap": "1g", "nodes": [node]}
    return {"other-format": {**good, "bm25aug_cluster": 99},
            "other-root": {**good, "root": str(root.parent / "elsewhere")},
            "home-outside": {**good, "nodes": [{**node, "home": str(root / "src")}]},
            "name-outside": {**good, "nodes": [{**node, "name": "..", "home": str(root / "..")}]},
            "heap-flags": {**good, "heap": "1g -XX:+PrintFlagsFinal"}}


@pytest.mark.parametrize("case", [*FOREIGN_STATE, "old-bm25aug-state", "forged-record"])
def test_a_folder_without_bm25augs_record_is_refused_and_left_as_it_was(tmp_path, case):
    """K7, K8, K9: a folder holding someone else's cluster.json (any content; also the state file an
    older bm25aug wrote, or a bm25aug-cluster.json that is not bm25aug's) beside a user's file:
    `stop`, `start`, `status` and `delete` each refuse in one line (no traceback) and every file
    stays byte for byte. `start` refuses before it looks for Maven (none on the PATH here, and an
    empty cache: a fetch would fail with another message)."""
    root = tmp_path / "fk"
    (root / "src").mkdir(parents=True)
    (root / "src" / "thesis.tex").write_text("\\section{Results}\n")
    if case in FOREIGN_STATE:
        (root / "cluster.json").write_text(FOREIGN_STATE[case])
    elif case == "old-bm25aug-state":
        (root / "cluster.json").write_text(json.dumps({"url": "http://127.0.0.1:9200", "root": str(root), "nodes": [
            {"name": "node-1", "http": 9200, "transport": 9300, "home": str(root / "node-1"), "pid": 0}]}))
    (tmp_path / "nomvn").mkdir()
    env = {**ENV, "PATH": str(tmp_path / "nomvn"), "BM25AUG_CACHE": str(tmp_path / "cache")}
    forged = _forged_records(root) if case == "forged-record" else {case: None}
    for name, record in forged.items():
        if record is not None:
            (root / "bm25aug-cluster.json").write_text(json.dumps(record))
        before = _files(root)
        for action in ("stop", "start", "status", "delete"):
            line = _one_line_error(_cli(action, "--root", str(root), env=env))
            assert "is not a cluster this command started" in line, (name, action, line)
            assert _files(root) == before, (name, action)
    assert not list((tmp_path / "cache").glob("opensearch-*"))  # no fetch was tried


def test_stop_or_delete_where_no_cluster_is_says_so(tmp_path):
    """K5: `stop` and `delete` on a missing folder and on an empty one end nothing and remove
    nothing, and say so (no "removed ..."); the empty folder stays; `status` refuses in one line."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for root in (tmp_path / "missing", empty):
        stopped = _cli("stop", "--root", str(root))
        assert stopped.returncode == 0 and "nothing to stop" in stopped.stdout and "removed" not in stopped.stdout
        deleted = _cli("delete", "--root", str(root))
        assert deleted.returncode == 0 and "nothing removed" in deleted.stdout, deleted.stdout
        assert "no cluster in" in _one_line_error(_cli("status", "--root", str(root)))
    assert empty.is_dir() and not (tmp_path / "missing").exists()


def test_delete_removes_what_the_cluster_wrote_and_keeps_a_users_file(tmp_path):
    """`delete` on a cluster's folder (nodes not running) that a user also put a file into: the node
    folders and the record go, the user's file and so the folder stay, and the output says so."""
    from bm25aug.opensearch.cluster_folder import folder

    root = folder(tmp_path / "cl")
    nodes = []
    for i in (1, 2):
        (root / f"node-{i}" / "data").mkdir(parents=True)
        (root / f"node-{i}" / "data" / "segment").write_bytes(b"x")
        nodes.append({"name": f"node-{i}", "http": 9200 + i, "transport": 9300 + i, "home": str(root / f"node-{i}"),
                      "pid": 0})
    (root / "bm25aug-cluster.json").write_text(json.dumps(
        {"bm25aug_cluster": 1, "root": str(root), "url": "http://127.0.0.1:9201,127.0.0.1:9202", "java": "/usr",
         "build": "/b", "heap": "1g", "nodes": nodes}))
    (root / "mine.txt").write_text("keep me")
    done = _cli("delete", "--root", str(root))
    assert done.returncode == 0, done.stderr
    assert "stopped 0 nodes" in done.stdout and "kept the folder" in done.stdout and "mine.txt" in done.stdout
    assert _files(root) == {"mine.txt": b"keep me"} and sorted(p.name for p in root.iterdir()) == ["mine.txt"]


# ------------------------------------------------------------------------------- on a real cluster
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 2-node cluster under a temporary folder; at the end no node of it runs and its folder is gone."""
    from bm25aug.opensearch import local

    base = tmp_path_factory.mktemp("cluster5")
    root = base / "root"
    state = local.start(2, root, heap="512m")
    try:
        yield state, root
    finally:
        local.delete(root)
        assert not root.exists() and _jvms(root) == []


def _client(root: Path):
    from bm25aug.opensearch import local
    from bm25aug.opensearch.client import Client, ClusterURL

    return Client(ClusterURL.parse(local.status(root)["url"], need_index=False), timeout=60)


def _raw(port: int, method: str, path: str, headers: dict) -> tuple[int, dict]:
    """One request with exactly these Host/Origin headers (http.client sends no Host of its own then)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, headers=headers)
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read() or b"{}")
    finally:
        connection.close()


def _hits(root: Path) -> list[str]:
    answer = _client(root).request("GET", "/keep/_search", body={"query": {"match": {"text": "cat"}}, "size": 10})
    return sorted(hit["_id"] for hit in answer["hits"]["hits"])


@pytest.mark.realdata
def test_the_nodes_answer_only_loopback_hosts_and_origins(cluster):
    """O26 (DNS rebinding): a DELETE with a foreign Host gets 421 and one with a foreign Origin 403,
    each with a JSON error, and the index is still there; loopback names, any port, are answered."""
    state, root = cluster
    port = state["nodes"][0]["http"]
    client = _client(root)
    client.request("PUT", "/o26", body={"settings": {"number_of_shards": 1, "number_of_replicas": 0}})
    status, body = _raw(port, "DELETE", "/o26", {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"})
    assert status == 421 and "Host" in body["error"] and "fix:" in body["error"]
    status, body = _raw(port, "DELETE", "/o26", {"Host": f"127.0.0.1:{port}", "Origin": "http://evil.example"})
    assert status == 403 and "Origin" in body["error"]
    status, _ = _raw(port, "GET", "/_cat/indices?format=json", {"Host": "evil.example"})
    assert status == 421
    for host in (f"localhost:{port}", "LOCALHOST", f"[::1]:{port}", f"127.0.0.1:{port}"):
        status, _ = _raw(port, "GET", "/o26", {"Host": host, "Origin": f"http://{host.lower()}"})
        assert status == 200, host
    assert "o26" in client.request("GET", "/o26")  # not deleted
    status, answer = _raw(port, "DELETE", "/o26", {"Host": f"localhost:{port}"})
    assert status == 200 and answer["acknowledged"]


@pytest.mark.realdata
def test_stop_keeps_the_data_and_start_brings_the_cluster_back(cluster):
    """Issue 60 item 1: `stop` ends every node and keeps the folder; `start` brings the same nodes
    back with their index (the same hits, green); a second `start` says it runs already."""
    _, root = cluster
    client = _client(root)
    client.request("PUT", "/keep", body={"settings": {"number_of_shards": 2, "number_of_replicas": 1}})
    docs = {"a": "the cat sat on the mat", "b": "a dog barked", "c": "a cat and another cat", "d": "cat food"}
    for doc_id, text in docs.items():
        client.request("PUT", f"/keep/_doc/{doc_id}", body={"text": text})
    client.request("POST", "/keep/_refresh")
    client.request("GET", "/_cluster/health/keep", params={"wait_for_status": "green", "timeout": "120s"})
    before = _hits(root)
    assert before == ["a", "c", "d"]

    stopped = _cli("stop", "--root", str(root))
    assert stopped.returncode == 0 and "stopped 2 nodes" in stopped.stdout and "data stays" in stopped.stdout
    assert _jvms(root) == [] and (root / "node-1" / "data").is_dir() and (root / "node-2" / "data").is_dir()
    assert re.findall(r"^node-\d: (\w+)", _cli("status", "--root", str(root)).stdout, re.M) == ["stopped"] * 2

    started = _cli("start", "--root", str(root))
    assert started.returncode == 0 and "node-1, node-2 started again" in started.stdout, started.stderr
    assert len(_jvms(root)) == 2 and _hits(root) == before
    health = _client(root).request("GET", "/_cluster/health", params={"wait_for_status": "green", "timeout": "120s"})
    assert health["status"] == "green" and health["number_of_nodes"] == 2
    assert "already runs" in _one_line_error(_cli("start", "--root", str(root)))


def _hold(port: int, wait_s: float = 30.0) -> socket.socket:
    """A socket listening on ``port``, once the killed node that had it has closed it (a JVM's
    process leaves /proc's command line before its sockets are closed)."""
    deadline = time.monotonic() + wait_s
    while True:
        holder = socket.socket()
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("127.0.0.1", port))
            holder.listen()
            return holder
        except OSError:
            holder.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.realdata
def test_start_brings_back_a_node_that_is_down_on_other_ports(cluster):
    """A node killed (the one whose vote elects a cluster manager: the other cannot go on without it)
    while its ports are taken by another program: `start` starts just that node, on other ports, and
    the node that ran on finds it there (the seed file); both run and the index answers as before."""
    from bm25aug.opensearch import local

    _, root = cluster
    state = local.status(root)
    before = _hits(root)
    answer = _client(root).request("GET", "/_cluster/state/metadata,nodes",
                                   params={"filter_path": "metadata.cluster_coordination,nodes"})
    voter = answer["nodes"][answer["metadata"]["cluster_coordination"]["last_committed_config"][0]]["name"]
    victim = next(node for node in state["nodes"] if node["name"] == voter)
    local.kill_node(state, voter)
    holders = [_hold(port) for port in (victim["http"], victim["transport"])]  # another program takes them
    try:
        started = _cli("start", "--root", str(root))
        assert started.returncode == 0 and f"({voter} started again" in started.stdout, started.stderr
        after = local.status(root)
        assert [node["running"] for node in after["nodes"]] == [True, True]
        moved = next(node for node in after["nodes"] if node["name"] == voter)
        assert (moved["http"], moved["transport"]) != (victim["http"], victim["transport"])
        assert _hits(root) == before
        assert re.findall(r"^node-\d: (\w+)", _cli("status", "--root", str(root)).stdout, re.M) == ["running"] * 2
    finally:
        for holder in holders:
            holder.close()


@pytest.mark.realdata
def test_a_start_that_fails_says_why_and_keeps_the_log(cluster, tmp_path):
    """K14: a heap the JVM refuses (`1m`) fails fast with the JVM's reason in the message and a log
    path that exists (the new cluster's folder itself is removed); no JVM is left. A heap that is
    no size at all is refused before anything starts."""
    root = tmp_path / "clh"
    line = _one_line_error(_cli("start", "--root", str(root), "--heap", "1m"))
    assert "Too small" in line and "exited while starting" in line, line
    log = Path(re.search(r"fix: see (\S+node\.log)", line).group(1))
    try:
        assert log.exists() and "Too small" in log.read_text()
        assert not root.exists() and _jvms(root) == []
    finally:
        shutil.rmtree(log.parent.parent, ignore_errors=True)
    for heap in ("abc", "1g -XX:+PrintFlagsFinal", "0"):
        assert "not a Java heap size" in _one_line_error(_cli("start", "--root", str(root), "--heap", heap))
        assert not root.exists()


@pytest.mark.realdata
def test_delete_removes_the_cluster_and_nothing_beside_it(cluster):
    """Last on the shared cluster: `delete` ends its nodes and removes its folder; a sibling folder
    stays as it was."""
    _, root = cluster
    sibling = root.parent / "sibling"
    (sibling / "node-1").mkdir(parents=True)
    (sibling / "node-1" / "notes.txt").write_text("mine")
    (sibling / "bm25aug-cluster.json").write_text("{}")
    before = _files(sibling)
    done = _cli("delete", "--root", str(root))
    assert done.returncode == 0 and f"removed {root} (node-1, node-2" in done.stdout, done.stdout + done.stderr
    assert "stopped 2 nodes" in done.stdout
    assert not root.exists() and _jvms(root) == [] and _files(sibling) == before
