"""The JVM processes of a local cluster's nodes (``local``): launching one (``launch``; what it
wrote since, ``log``, and why it ended, ``reason``), whether it runs, ending nodes, and finding a
node that runs from a cluster's folder whatever its record says.

A node is launched as ``<JDK>/bin/java <options> ClusterNode <home>``, where ``<home>`` is
``<root>/<name>`` (``root`` resolved: ``cluster_folder.folder``), so its command line names the
folder it runs from. Only such a command line is a node's (``_home``): a program named ``java``
whose main class is ``ClusterNode`` followed by the home alone, never another program that names
them (an editor, grep, ``strace java ...``), which is never signalled. A recorded node runs only
while its recorded pid's command line is such a JVM with its own home (a pid reused by another
program does not count). ``strays`` reads every process's command line (``/proc``) for this
user's node JVMs whose home is a node folder of ``root`` and that the record does not hold as
running: nodes left when the record was removed or rewritten (by hand, or with a folder around
it), which ``cluster stop`` and ``delete`` then end and ``status`` names, and which ``start`` waits
for (a second JVM on the same data would fail on its lock). ``inside`` finds those whose home is
deeper in ``root`` (another cluster's, nested in it): ``enclosed`` refuses to start or delete the
cluster in ``root`` while one runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.opensearch.cluster_folder import NODE_NAME

STOP_WAIT_S = 30.0  # from SIGTERM to SIGKILL
MAIN = b"ClusterNode"  # the class a node's JVM runs (node/ClusterNode.java); its home follows it
VALUED = (b"-cp", b"-classpath", b"--class-path")  # java's options before the main class that take the next argument


def alive(node: dict) -> bool:
    """Whether the node's process runs (a pid reused by another program does not count)."""
    pid = node.get("pid") or 0
    try:
        command = _command(pid)
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


def _command(pid: int | str) -> list[bytes]:
    """The arguments of process ``pid`` (an ``OSError`` when it is gone or not ours to read)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        command = f.read().split(b"\0")
    return command[:-1] if command[-1:] == [b""] else command


def _home(command: list[bytes]) -> str | None:
    """The home a node's JVM's command line names, as ``launch`` starts it: a program named ``java``,
    options (``-cp`` with its value), the main class ``ClusterNode``, then the home alone; None for
    any other command line, such as one that only names them as arguments."""
    if not command or os.path.basename(command[0]) != b"java":
        return None
    args = iter(command[1:])
    for arg in args:
        if arg in VALUED:
            next(args, None)
        elif not arg.startswith(b"-"):  # the main class
            rest = list(args)
            return os.fsdecode(rest[0]) if arg == MAIN and len(rest) == 1 and rest[0] else None
    return None


def _running() -> list[dict]:
    """This user's node processes (``name``, ``home``, ``pid``), whatever their folder."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            home = _home(_command(entry.name))
        except OSError:  # it ended meanwhile
            continue
        if home is not None:
            node = {"name": Path(home).name, "home": home, "pid": int(entry.name)}
            if alive(node):
                found.append(node)
    return sorted(found, key=lambda node: (node["home"], node["pid"]))


def strays(root: Path, recorded: list[dict]) -> list[dict]:
    """This user's node processes whose home is a node folder of ``root`` (``<root>/node-N``) and
    that are not the running nodes in ``recorded``, as nodes (``name``, ``home``, ``pid``), by name."""
    known = {node["pid"] for node in recorded if alive(node)}
    found = [node for node in _running() if node["pid"] not in known and _own(root, Path(node["home"]))]
    return sorted(found, key=lambda node: (node["name"], node["pid"]))


def _own(root: Path, home: Path) -> bool:
    return home.parent == root and NODE_NAME.fullmatch(home.name) is not None


def inside(root: Path) -> list[dict]:
    """This user's node processes whose home is inside ``root`` but not one of its node folders:
    nodes of a cluster nested in ``root``'s folder (its record gone, or not: they run either way)."""
    return [node for node in _running() if root in Path(node["home"]).parents and not _own(root, Path(node["home"]))]


def enclosed(root: Path, doing: str) -> None:
    """An error, naming it, when a node of another cluster runs from inside ``root`` (``inside``):
    ``doing`` (deleting, starting the cluster in ``root``) would remove or share its data."""
    if nodes := inside(root):
        home = Path(nodes[0]["home"])
        raise UserError(f"a node of another cluster runs from inside {root} (pid {nodes[0]['pid']}, home {home}), "
                        f"and {doing}; fix: stop it with `bm25aug cluster stop --root {home.parent}` (and move that "
                        f"folder out of {root} to keep its data) first; nothing was stopped or removed")


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
