"""The JVM processes of a local cluster's nodes (``local``): launching one (``launch``; what it
wrote since, ``log``, and why it ended, ``reason``), whether it runs, ending nodes, and finding a
node that runs from a cluster's folder whatever its record says.

A node is launched as ``java ... ClusterNode <home>``, where ``<home>`` is ``<root>/<name>``
(``root`` resolved: ``cluster_folder.folder``), so its command line names the folder it runs from.
A recorded node runs only while its recorded pid's command line is such a JVM with its own home (a
pid reused by another program does not count). ``strays`` reads every process's command line
(``/proc``) for this user's ``ClusterNode`` JVMs whose home is a node folder of ``root`` and that
the record does not hold as running: nodes left when the record was removed or rewritten (by hand,
or with a folder around it), which ``cluster stop`` and ``delete`` then end and ``status`` names,
and which ``start`` waits for (a second JVM on the same data would fail on its lock).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from bm25aug.opensearch.cluster_folder import NODE_NAME

STOP_WAIT_S = 30.0  # from SIGTERM to SIGKILL
MAIN = b"ClusterNode"  # the class a node's JVM runs (node/ClusterNode.java); its home follows it


def alive(node: dict) -> bool:
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
    return _home(command) == node["home"]


def _home(command: list[bytes]) -> str | None:
    """The home a ``ClusterNode`` JVM's command line names (the argument after the class), or None."""
    if MAIN not in command[:-1]:
        return None
    return os.fsdecode(command[command.index(MAIN) + 1])


def strays(root: Path, recorded: list[dict]) -> list[dict]:
    """This user's node processes whose home is a node folder of ``root`` (``<root>/node-N``) and
    that are not the running nodes in ``recorded``, as nodes (``name``, ``home``, ``pid``), by name."""
    known = {node["pid"] for node in recorded if alive(node)}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in known:
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            home = _home((entry / "cmdline").read_bytes().split(b"\0"))
        except OSError:  # it ended meanwhile
            continue
        if home is not None and Path(home).parent == root and NODE_NAME.fullmatch(Path(home).name):
            node = {"name": Path(home).name, "home": home, "pid": int(entry.name)}
            if alive(node):
                found.append(node)
    return sorted(found, key=lambda node: (node["name"], node["pid"]))


def named(nodes: list[dict]) -> str:
    """Nodes for a message: ``node-1 (pid 123), ...``."""
    return ", ".join(f"{node['name']} (pid {node['pid']})" for node in nodes)


def end(nodes: list[dict]) -> int:
    """SIGTERM to each running node, SIGKILL to those still running after ``STOP_WAIT_S``; how many
    ran. Every node's pid is 0 afterwards."""
    running = [n for n in nodes if alive(n)]
    for node in running:
        send(node, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while any(alive(n) for n in running) and time.monotonic() < deadline:
        time.sleep(0.2)
    for node in running:
        if alive(node):
            send(node, signal.SIGKILL)
    while any(alive(n) for n in running):
        time.sleep(0.1)
    for node in nodes:
        node["pid"] = 0
    return len(running)


def send(node: dict, number: int) -> None:
    """Signal ``number`` to the node's process."""
    try:
        os.kill(node["pid"], number)
    except ProcessLookupError:  # it ended meanwhile
        pass


def launch(state: dict, node: dict) -> int:
    """Start the JVM of ``node`` of the cluster ``state``, its output appended to its ``node.log``; its pid."""
    path = Path(node["home"]) / "node.log"
    node["log_from"] = path.stat().st_size if path.exists() else 0  # where this launch's lines begin
    out = open(path, "ab")
    command = [str(Path(state["java"]) / "bin" / "java"), f"-Xms{state['heap']}", f"-Xmx{state['heap']}",
               "-XX:+UseSerialGC", "-Dfile.encoding=UTF-8", "-Djava.awt.headless=true", "-Dlog4j2.disable.jmx=true",
               "-Dopensearch.networkaddress.cache.ttl=60",
               "-cp", os.pathsep.join([str(Path(state["build"]) / "classes"), str(Path(state["build"]) / "lib" / "*")]),
               MAIN.decode(), node["home"]]
    with out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    return process.pid


def log(node: dict) -> str:
    """What the node's JVM wrote since its last launch."""
    try:
        with open(Path(node["home"]) / "node.log", "rb") as f:
            f.seek(node.get("log_from", 0))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def reason(node: dict) -> str:
    """Why a node's JVM ended, from what it wrote since its launch: the last ERROR line or uncaught
    exception (the line that leads its stack trace), else (a JVM that did not start, such as one
    refused its heap) its last lines."""
    lines = [line for line in log(node).splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line or line.startswith("Exception")]
    return " ".join(" ".join(errors[-1:] or lines[-3:] or ["no output"]).split())[:300]
