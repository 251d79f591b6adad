"""Which OpenSearch a local cluster runs (issue 60 item 4), without starting one: the version is a
choice made when the cluster is made (``--opensearch``, default ``launcher.DEFAULT``), kept in its
record (a record without one ran 2.19.6), and a start on that folder with another version is one
line that changes nothing; each version gets a JDK it runs on and its own jars. Starting each
engine and its scores: ``test_cluster`` (3.x, bit for bit) and ``test_reliability_five_cluster_index``
(2.19, to float32 rounding; a stopped cluster comes back on its recorded version there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bm25aug.errors import UserError
from bm25aug.opensearch import cluster_folder as folder
from bm25aug.opensearch import launcher, local

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
NEWEST = launcher.DEFAULT  # a 3.x: Java 21 or later


def _recorded(root: Path, opensearch: str | None) -> bytes:
    """A stopped two-node cluster's record in ``root`` (``opensearch`` None: one written before
    versions were recorded), the nodes' config folders beside it; the record's bytes."""
    nodes = [{"name": f"node-{i}", "http": 9200 + i, "transport": 9300 + i, "home": str(root / f"node-{i}"), "pid": 0}
             for i in (1, 2)]
    state = folder.new(root, "http://127.0.0.1:9201,127.0.0.1:9202", opensearch or "", "/nowhere/jdk", "/nowhere/build",
                       "1g", nodes)
    if opensearch is None:
        del state["opensearch"]
    for node in nodes:
        (Path(node["home"]) / "config").mkdir(parents=True)
    (root / folder.RECORD).write_text(json.dumps(state))
    return (root / folder.RECORD).read_bytes()


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bm25aug.cli", "cluster", *args], capture_output=True, text=True,
                          env=ENV, timeout=120)


def _fake_jdk(where: Path, version: str, javac: bool = True) -> Path:
    (where / "bin").mkdir(parents=True)
    (where / "release").write_text(f'JAVA_VERSION="{version}"\n')
    for tool in ("java", "javac") if javac else ("java",):
        (where / "bin" / tool).write_text("#!/bin/sh\n")
    return where


def test_the_default_is_a_3x_engine_and_2_19_stays_supported():
    assert launcher.DEFAULT in launcher.ENGINES and launcher.DEFAULT.startswith("3.")
    assert "2.19.6" in launcher.ENGINES and local.OPENSEARCH == launcher.DEFAULT
    assert launcher.ENGINES["2.19.6"].java == (17, 21) and launcher.ENGINES[launcher.DEFAULT].java == (21, None)
    assert len({launcher.cache(version) for version in launcher.ENGINES}) == len(launcher.ENGINES)


def test_a_record_without_a_version_reads_as_2_19_6(tmp_path):
    root = tmp_path / "old"
    root.mkdir()
    _recorded(root, None)
    assert folder.read(root)["opensearch"] == folder.UNRECORDED == "2.19.6"
    root = tmp_path / "new"
    root.mkdir()
    _recorded(root, launcher.DEFAULT)
    assert folder.read(root)["opensearch"] == launcher.DEFAULT


@pytest.mark.parametrize("recorded", [None, "2.19.6", launcher.DEFAULT])
def test_start_with_another_version_than_the_recorded_one_is_one_line_and_changes_nothing(tmp_path, recorded):
    root = tmp_path / "cluster"
    root.mkdir()
    before = _recorded(root, recorded)
    runs = recorded or "2.19.6"
    other = next(version for version in launcher.ENGINES if version != runs)
    done = _cli("start", "--root", str(root), "--opensearch", other)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"the cluster in {root} runs OpenSearch {runs}" in lines[0] and f"not {other}; fix: start it without " \
        f"--opensearch, or `bm25aug cluster delete --root {root}` first" in lines[0]
    assert (root / folder.RECORD).read_bytes() == before and sorted(p.name for p in root.iterdir()) == \
        sorted([folder.RECORD, "node-1", "node-2"])


def test_an_unknown_version_is_refused_before_anything_is_written(tmp_path):
    root = tmp_path / "cluster"
    with pytest.raises(UserError) as refused:
        local.start(root=root, opensearch="9.9.9")
    assert str(refused.value) == (f"OpenSearch 9.9.9 is not one a local cluster runs; fix: pass --opensearch "
                                  f"{' or '.join(launcher.ENGINES)} (default {launcher.DEFAULT}), or point "
                                  f"--to/--index at a cluster of your own")
    assert not root.exists()
    done = _cli("start", "--root", str(root), "--opensearch", "1.3.0")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "OpenSearch 1.3.0" in done.stderr
    assert not root.exists()


def test_each_version_gets_a_jdk_it_runs_on(tmp_path, monkeypatch):
    """Candidates in order: BM25AUG_CLUSTER_JAVA_HOME, JAVA_HOME, the PATH's java, the JVM folder;
    the first with javac of a Java the version runs on wins; none: one line naming what was found."""
    jvms = tmp_path / "jvm"
    j17, j21, j25 = (_fake_jdk(jvms / f"jdk-{v}", f"{v}.0.2") for v in (17, 21, 25))
    runtime = _fake_jdk(tmp_path / "jre-25", "25.0.1", javac=False)
    monkeypatch.setattr(launcher, "JVM_ROOT", jvms)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("BM25AUG_CLUSTER_JAVA_HOME", str(runtime))  # no javac: passed over
    assert launcher.java_home(NEWEST) == j21 and launcher.java_home("2.19.6") == j17
    monkeypatch.setenv("JAVA_HOME", str(j25))
    assert launcher.java_home(NEWEST) == j25 and launcher.java_home("2.19.6") == j17
    monkeypatch.setenv("BM25AUG_CLUSTER_JAVA_HOME", str(j21))
    assert launcher.java_home(NEWEST) == j21 and launcher.java_home("2.19.6") == j21
    monkeypatch.setenv("BM25AUG_CLUSTER_JAVA_HOME", str(runtime))
    for jdk in (j21, j25):
        (jdk / "bin" / "javac").unlink()
    with pytest.raises(UserError) as none:
        launcher.java_home(NEWEST)
    message = str(none.value)
    assert "\n" not in message and message.startswith(f"no JDK 21 or later for OpenSearch {NEWEST}'s nodes among ")
    assert f"{runtime} (Java 25, no javac)" in message and f"{j17} (Java 17)" in message
    assert message.endswith("fix: install one and set BM25AUG_CLUSTER_JAVA_HOME to it, or start a new cluster with "
                            "--opensearch 2.19.6 (Java 17 to 21)")


def test_each_version_has_its_own_jars_and_launcher():
    """The cached build of each version (fetched here if no cluster test did yet): its own folder,
    the engine's jar of that version, the launcher compiled with that major's Engine.java."""
    builds = {version: launcher.fetch(version, quiet=True) for version in launcher.ENGINES}
    assert len(set(builds.values())) == len(builds)
    for version, build in builds.items():
        assert build.parent == launcher.cache(version) and (build / "ready").read_text() == version
        jars = {p.name for p in (build / "lib").glob("opensearch-*.jar")}
        assert f"opensearch-{version}.jar" in jars and all(jar.endswith(f"-{version}.jar") for jar in jars)
        assert {p.name for p in (build / "classes").glob("*.class")} >= {"ClusterNode.class", "Engine.class",
                                                                         "Engine$LoopbackOnly.class"}


def test_start_only_flags_with_another_action_are_one_line(tmp_path):
    """`--opensearch`, `--nodes` and `--heap` choose what `start` makes: with stop, status or delete
    they are refused in one line, not ignored, and nothing is touched."""
    for action in ("stop", "status", "delete"):
        done = _cli(action, "--root", str(tmp_path), "--opensearch", "2.19.6", "--nodes", "3")
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "--nodes --opensearch go only with `cluster start`" in done.stderr and "fix:" in done.stderr
    assert list(tmp_path.iterdir()) == []
