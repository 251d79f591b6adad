"""``bm25aug cluster start|status|stop|delete``: a real OpenSearch cluster on this machine, for trying
the cluster path and for the tests. Each node is its own JVM process (``node/ClusterNode.java``),
with its own data folder, HTTP and transport ports; they find each other over loopback and elect a
cluster manager as a multi-machine cluster does. A node answers only requests whose Host (and
Origin, if any) is a loopback name: 421 and 403 otherwise, against DNS rebinding. For a real
deployment, point ``--to``/``--index`` at your own cluster's URL instead (docs/scale-out.md).

The nodes run OpenSearch ``launcher.DEFAULT`` (3.x: scores bit for bit Lucene's) or another of
``launcher.ENGINES`` (``--opensearch 2.19.6``), chosen when the cluster is made and kept in its
record, on a JDK that version runs on, with its jars fetched once with Maven (``launcher``).

The cluster's folder (``--root``) is bm25aug's only when it holds bm25aug's record
(``cluster_folder``): any other folder is refused and left as it is. ``stop`` ends every node
(SIGTERM, then SIGKILL after ``node_processes.STOP_WAIT_S``) and keeps their data; ``start`` on
that folder brings the same cluster back (names, data, ports where free), or only its nodes that do
not run. ``delete`` stops the nodes and removes what the cluster wrote. One cluster's folder is never
inside another's, nor holds one (``cluster_folder.alone``), nor a running node of one
(``node_processes.enclosed``), checked again just before a new cluster's record is written. A
node that runs from the folder without its record holding it (the record removed, or the folder
with it) is found by its process (``node_processes.strays``): ``status`` names it, ``stop`` and
``delete`` end it, ``start`` refuses until it is ended. ``kill_node``/``start_node`` crash and
restart one node (the fault tests).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT
from bm25aug.opensearch import cluster_folder as folder
from bm25aug.opensearch.client import Client, ClusterURL
from bm25aug.opensearch.launcher import DEFAULT as OPENSEARCH, engine, fetch, java_home
from bm25aug.opensearch.node_processes import alive as _alive, end as _end, launch as _launch, log as _log, named
from bm25aug.opensearch.node_processes import enclosed, reason as _reason, send as _signal, strays
from bm25aug.opensearch.node_settings import cluster_name, place

ROOT = Path(os.environ.get("BM25AUG_CLUSTER_ROOT", CACHE_ROOT / "cluster"))
NODES, HEAP = 3, "1g"  # three manager-eligible nodes: any one may die and a manager is still elected
START_WAIT_S = 180.0
BIND_TRIES = 3  # launches of a node whose port another program took between our check and its bind


class StartFailed(UserError):
    """The cluster did not form: ``what`` happened, and the log that says why (``node``'s, or every
    node's when ``node`` is None)."""

    def __init__(self, what: str, logs: Path, node: str | None = None):
        self.what, self.node = what, node
        where = logs / node / "node.log" if node else f"the nodes' logs under {logs}"
        super().__init__(f"{what}; fix: see {where}")


def start(nodes: int | None = None, root: Path = ROOT, heap: str | None = None, opensearch: str | None = None) -> dict:
    """Start the cluster in ``root`` and wait until every node has joined; its state. A missing or
    empty ``root`` gets a new cluster of ``nodes`` nodes (default ``NODES``) of ``heap`` each
    (default ``HEAP``) running OpenSearch ``opensearch`` (default ``OPENSEARCH``); a cluster's folder
    gets its own nodes back, those that do not run, with their data and recorded version
    (``nodes``/``opensearch``, if given, must be theirs; ``heap``, if given, is theirs from now on)."""
    root = folder.folder(root)
    if nodes is not None and nodes < 1:
        raise UserError(f"--nodes {nodes}: a cluster has at least one node; fix: pass --nodes 2 or more")
    if heap is not None and not folder.HEAP_SIZE.fullmatch(heap):
        raise UserError(f"--heap {heap!r} is not a Java heap size; fix: pass a number with k, m or g, such as 1g")
    if opensearch is not None:
        engine(opensearch)  # one a local cluster runs
    with folder.lock(root):
        folder.alone(root, None)  # (before `_found`: a folder inside another cluster's is refused as that)
        enclosed(root, _HOLDING.format(root=root))
        state, running = _found(root)
        if running:
            raise UserError(f"nodes of a cluster run from {root} without its record holding them ({named(running)}), "
                            f"and a node started now would share their data; fix: `bm25aug cluster stop --root "
                            f"{root}` first")
        folder.alone(root, state)
        if state is None:
            return _start_new(root, nodes or NODES, heap or HEAP, opensearch or OPENSEARCH)
        if opensearch not in (None, state["opensearch"]):
            raise UserError(f"the cluster in {root} runs OpenSearch {state['opensearch']} (its data is that "
                            f"version's), not {opensearch}; fix: start it without --opensearch, or `bm25aug cluster "
                            f"delete --root {root}` first for a new one")
        return _start_again(state, nodes, heap)


def _start_new(root: Path, nodes: int, heap: str, opensearch: str) -> dict:
    """A new cluster in the missing or empty ``root``. Its folder is checked again after the (slow)
    fetch, just before its record, the first thing it writes there: of two starts that passed their
    checks meanwhile, one in the other's folder, the later is refused. If it does not form (or the
    start is interrupted), its nodes are ended and what it wrote is removed; when it did not form, the
    nodes' logs are first copied to a temporary folder, which the error names."""
    build, home = fetch(opensearch), java_home(opensearch)
    state = folder.new(root, "", opensearch, str(home), str(build), heap,
                       [{"name": f"node-{i + 1}", "http": 0, "transport": 0, "home": str(root / f"node-{i + 1}"),
                         "pid": 0} for i in range(nodes)])
    folder.alone(root, state)  # again: another start may have made a cluster around `root` or inside it
    enclosed(root, _HOLDING.format(root=root))
    if folder.read(root) is not None:  # (or anything else in it: refused as not a cluster's)
        raise UserError(f"{root} got a cluster record while this start fetched OpenSearch; fix: `bm25aug cluster "
                        f"status --root {root}`")
    folder.write(root, state)  # before any node starts, so that `stop` finds each one that did
    try:
        place(state, state["nodes"])
        folder.write(root, state)
        _bring_up(state, state["nodes"], "red")
    except BaseException as e:
        _end(state["nodes"])
        logs = _keep_logs(state) if isinstance(e, StartFailed) else None
        folder.remove(root, state)
        if logs is not None:
            raise StartFailed(f"{e.what} (the new cluster's folder is removed)", logs, e.node) from None
        raise
    return state


_HOLDING = "a cluster in {root} would hold another's folder (and its `delete` remove that node's data)"


def _start_again(state: dict, nodes: int | None, heap: str | None) -> dict:
    """The recorded cluster's nodes that do not run, started with their data; an error when all run.
    If they do not join, they are ended again (their data and logs stay)."""
    root = Path(state["root"])
    if nodes is not None and nodes != len(state["nodes"]):
        raise UserError(f"the cluster in {root} has {len(state['nodes'])} nodes, not {nodes}; fix: start it without "
                        f"--nodes, or `bm25aug cluster delete --root {root}` first for a new one")
    down = [node for node in state["nodes"] if not _alive(node)]
    if not down:
        raise UserError(f"a cluster already runs from {root} ({state['url']}); fix: use it, or "
                        f"`bm25aug cluster stop --root {root}` first")
    for node in down:
        if not (Path(node["home"]) / "config").is_dir():
            raise UserError(f"the cluster in {root} lacks {node['name']}'s folder; fix: `bm25aug cluster delete "
                            f"--root {root}`, then start a new one")
    version = state["opensearch"]
    state.update(build=str(fetch(version)), java=str(java_home(version)), heap=heap or state["heap"])
    place(state, down)
    folder.write(root, state)
    try:
        _bring_up(state, down, "yellow")  # every primary active: its data serves; replicas catch up
    except BaseException:
        _end(down)
        folder.write(root, state)
        raise
    state["started_again"] = [node["name"] for node in down]
    return state


def _bring_up(state: dict, nodes: list[dict], status: str) -> None:
    """Launch ``nodes`` and wait until every node of the cluster has joined (``wait_ready``). A node
    that could not bind its port (another program took it after ``free_port`` saw it free) is
    launched again on other ports, ``BIND_TRIES`` times in all."""
    _launch_all(state, nodes)
    for tries in range(1, BIND_TRIES + 1):
        try:
            return wait_ready(state, len(state["nodes"]), status=status)
        except StartFailed as e:
            node = next((n for n in nodes if n["name"] == e.node), None)
            if node is None or tries == BIND_TRIES or "Failed to bind to" not in _log(node):
                raise
            place(state, [node], own=False)
            _launch_all(state, [node])


def _launch_all(state: dict, nodes: list[dict]) -> None:
    for node in nodes:
        node["pid"] = _launch(state, node)
        folder.write(Path(state["root"]), state)


def wait_ready(state: dict, nodes: int, timeout: float = START_WAIT_S, status: str = "red") -> None:
    """Wait until ``nodes`` nodes form the cluster (``status`` green: and every shard copy is
    active); a ``StartFailed`` with a dead node's reason, or the last health seen, otherwise."""
    client = Client(ClusterURL.parse(state["url"], need_index=False), timeout=10, credentials=False)
    deadline = time.monotonic() + timeout
    health: dict = {}
    while True:
        dead = [n for n in state["nodes"] if not _alive(n)]
        if dead:  # looked at again a moment later: a JVM just launched was once seen as gone
            time.sleep(1.0)
            dead = [n for n in dead if not _alive(n)]
        if dead:
            raise StartFailed(f"node {dead[0]['name']} of the cluster exited while starting ({_reason(dead[0])})",
                              Path(state["root"]), dead[0]["name"])
        if not all(_listening(n["http"]) for n in state["nodes"]):
            # (a node opens its HTTP port once it has joined: asking before would only log it as failing)
            time.sleep(0.5)
        else:
            try:
                health = client.request("GET", "/_cluster/health", ok=(408,), params={
                    "wait_for_nodes": f">={nodes}", "wait_for_status": status, "timeout": "5s"})
                # (a node of another program's cluster on a port this one's node failed to bind is not it)
                ours = health.get("cluster_name") == cluster_name(Path(state["root"]))
                if ours and health.get("number_of_nodes", 0) >= nodes and not health.get("timed_out"):
                    return
            except UserError:
                time.sleep(1.0)
        if time.monotonic() > deadline:
            seen = f"{health.get('number_of_nodes', 0)} nodes, {health.get('status', 'no answer')}"
            raise StartFailed(f"the cluster did not reach {nodes} nodes, {status}, within {timeout:.0f} s ({seen})",
                              Path(state["root"]))


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _keep_logs(state: dict) -> Path:
    """Each node's log copied to a new temporary folder (``<name>/node.log``), before its own goes."""
    kept = Path(tempfile.mkdtemp(prefix="bm25aug-cluster-logs-"))
    for node in state["nodes"]:
        log = Path(node["home"]) / "node.log"
        if log.exists():
            (kept / node["name"]).mkdir()
            shutil.copyfile(log, kept / node["name"] / "node.log")
    return kept


def status(root: Path = ROOT) -> dict:
    """Each node's process and the cluster's health, as the cluster itself reports it."""
    root = folder.folder(root)
    state, running = _found(root)
    if state is None and running:
        raise UserError(f"no cluster record in {root}, but nodes of a cluster run from it ({named(running)}): its "
                        f"record was removed; fix: `bm25aug cluster stop --root {root}` ends them")
    if state is None:
        raise UserError(f"no cluster in {root}; fix: `bm25aug cluster start --root {root}`")
    state["strays"] = running
    for node in state["nodes"]:
        node["running"] = _alive(node)
    if not any(node["running"] for node in state["nodes"]):
        state["health"] = {"status": "stopped", "number_of_nodes": 0}
        return state
    try:
        client = Client(ClusterURL.parse(state["url"], need_index=False), timeout=10, credentials=False)
        state["health"] = client.request("GET", "/_cluster/health")
        state["manager"] = elected_manager(client)
    except UserError as e:
        state["health"] = {"status": "unreachable", "error": str(e)}
    return state


def elected_manager(client: Client) -> str | None:
    """The name of the node the cluster elected its manager (None while it has none)."""
    answer = client.request("GET", "/_cluster/state/cluster_manager_node,nodes", params={"local": "true"})
    node = answer.get("nodes", {}).get(answer.get("cluster_manager_node") or "")
    return node["name"] if node else None


def _found(root: Path) -> tuple[dict | None, list[dict]]:
    """The cluster recorded in ``root`` (None: none) and the nodes that run from it without its record
    holding them (``strays``). A folder that is no cluster's is refused (``folder.read``) unless such
    nodes run from it (their record was removed): its state is then None."""
    try:
        state = folder.read(root)
    except UserError:
        if not (running := strays(root, [])):
            raise
        return None, running
    return state, strays(root, state["nodes"] if state else [])


def _ended(root: Path, then, before=None) -> dict | None:
    """Under the folder's lock: ``before(root, state)`` (it may refuse), then end every node that runs
    from ``root`` (its cluster's and ``strays``), then ``then(root, state)``; ``stopped``: how many
    ran, ``state`` (None: ``root`` holds no record), ``strays`` (in words, '' when none) and what
    ``then`` gave (as ``done``). None: no cluster in ``root``, and no node runs from it."""
    root = folder.folder(root)
    with folder.lock(root):
        state, running = _found(root)
        if state is None and not running:
            return None
        if state is not None and before is not None:
            before(root, state)
        strays = named(running)  # (before they end: their pids)
        ended = _end(running + (state["nodes"] if state else []))
        done = None if state is None else then(root, state)
        return {"stopped": ended, "state": state, "strays": strays, "done": done}


def stop(root: Path = ROOT) -> int | None:
    """End every node of the cluster in ``root`` (and any that runs from it without being in its
    record), keeping its folder and data; how many nodes were running (None: ``root`` holds no
    cluster, and no node runs from it)."""
    done = _ended(root, folder.write)
    return None if done is None else done["stopped"]


def delete(root: Path = ROOT) -> dict | None:
    """End the cluster's nodes if they run and remove what it wrote in ``root`` (``root`` too, when
    nothing else is in it): ``stopped`` nodes, the ``nodes`` removed, the names ``kept`` in ``root``,
    the ``strays`` ended, ``recorded``: whether ``root`` held a cluster (when not, nothing is removed;
    None: nor did any node run from it). Refused, before anything is ended, when a node folder holds
    another cluster's folder, or a node of another cluster runs from inside ``root`` (``_deletable``)."""
    if (done := _ended(root, folder.remove, before=_deletable)) is None:
        return None
    state = done["state"]
    return {"stopped": done["stopped"], "nodes": [node["name"] for node in state["nodes"]] if state else [],
            "kept": done["done"], "strays": done["strays"], "recorded": state is not None}


def _deletable(root: Path, state: dict) -> None:
    """An error when removing what the cluster in ``root`` wrote would remove another cluster's data:
    a node folder holds its record (``folder.holding``), or one of its nodes runs from inside ``root``
    (``enclosed``: its record gone, or anywhere in the folder)."""
    folder.holding(root, state)
    enclosed(root, f"deleting the cluster in {root} would remove its data from under it")


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
    _launch_all(state, [node])
    # every primary active (yellow): it serves; its replicas catch up in the background, as long as
    # recovery takes (on a loaded 2-core machine, past minutes)
    wait_ready(state, len(state["nodes"]), status="yellow")


def _node(state: dict, name: str) -> dict:
    for node in state["nodes"]:
        if node["name"] == name:
            return node
    raise UserError(f"the cluster has no node {name!r}; fix: name one of {[n['name'] for n in state['nodes']]}")


def run(args) -> None:
    """``bm25aug cluster start|status|stop|delete``."""
    root = folder.folder(args.root or ROOT)
    if args.action != "start" and (given := [f"--{n}" for n in ("nodes", "heap", "opensearch") if vars(args)[n]]):
        raise UserError(f"{' '.join(given)} go only with `cluster start`; fix: drop them from `cluster {args.action}`")
    if args.action == "start":
        state = start(args.nodes, root, args.heap, args.opensearch)
        again = state.get("started_again")
        print(f"OpenSearch {state['opensearch']}: {len(state['nodes'])} nodes running from {root}"
              + (f" ({', '.join(again)} started again, with their data)" if again else ""))
        print(state["url"])
    elif args.action == "status":
        state = status(root)
        for node in state["nodes"]:
            print(f"{node['name']}: {'running' if node['running'] else 'stopped'} (pid {node['pid']}, "
                  f"http 127.0.0.1:{node['http']})" + (", elected manager" if node["name"] == state.get("manager") else ""))
        for node in state["strays"]:
            print(f"{node['name']}: running without being in the record (pid {node['pid']}; `bm25aug cluster stop "
                  f"--root {root}` ends it)")
        health = state["health"]
        print(f"health: {health.get('status')} ({health.get('number_of_nodes', 0)} nodes)"
              + (f": {health['error']}" if "error" in health else ""))
        print(state["url"])
    elif args.action == "stop":
        done = _ended(root, folder.write)
        strays = f" ({done['strays']}: not in its record, stopped too)" if done and done["strays"] else ""
        print(f"no cluster in {root}: nothing to stop" if done is None else
              f"stopped {done['stopped']} nodes that ran from {root} with no cluster record there ({done['strays']}); "
              f"nothing in the folder was changed" if done["state"] is None else
              f"stopped {done['stopped']} nodes{strays}; their data stays in {root} (`bm25aug cluster start --root "
              f"{root}` starts them again, `bm25aug cluster delete --root {root}` removes it)")
    else:
        _print_deleted(root, delete(root))


def _print_deleted(root: Path, done: dict | None) -> None:
    if done is None:
        print(f"no cluster in {root}: nothing removed")
    elif not done["recorded"]:
        print(f"stopped {done['stopped']} nodes that ran from {root} with no cluster record there ({done['strays']}); "
              f"nothing removed (without its record, bm25aug does not know what in that folder it wrote)")
    elif not done["kept"]:
        print(f"stopped {done['stopped']} nodes; removed {root} ({', '.join(done['nodes'])}: their data and logs)")
    else:
        print(f"stopped {done['stopped']} nodes; removed {', '.join(done['nodes'])} (their data and logs) and "
              f"{folder.RECORD} from {root}; kept the folder, which holds files bm25aug did not write "
              f"({', '.join(done['kept'][:3])}{', ...' if len(done['kept']) > 3 else ''})")
