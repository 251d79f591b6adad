"""A local cluster's nodes' ports and settings files (``bm25aug.opensearch.local``): each node's
``config/opensearch.yml`` and ``config/unicast_hosts.txt``, the seed list every node reads again at
each discovery round, so that a node started again on other ports is found by those that ran on.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.io import atomic_write_text, digest

HTTP_PORT, TRANSPORT_PORT = 9200, 9300  # node i's preferred ports: these + i


def free_port(preferred: int, taken: set[int]) -> int:
    """``preferred`` when nobody listens there, else a port the system picks. (Bound as a node binds,
    with SO_REUSEADDR: a port a stopped node left in TIME_WAIT is free.)"""
    for port in (preferred, 0):
        if port in taken:
            continue
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise UserError("no free port for a node; fix: free ports 9200-9300 or stop other servers")


def cluster_name(root: Path) -> str:
    """The cluster's name, its folder's own: a node of another local cluster that took over a port
    this one's nodes knew (while one was down) is not taken for one of theirs (discovery matches on
    it), nor its answer for this cluster's (``local.wait_ready``)."""
    return f"bm25aug-local-{digest(str(root).encode())[:12]}"


def node_config(name: str, http: int, transport: int, seeds: list[int], names: list[str], home: Path) -> str:
    """The text of a node's ``config/opensearch.yml``."""
    lines = {"cluster.name": cluster_name(home.parent), "node.name": name, "network.host": "127.0.0.1",
             "http.port": http, "transport.port": transport, "path.data": str(home / "data"),
             "path.logs": str(home / "logs"),
             "discovery.seed_hosts": json.dumps([f"127.0.0.1:{p}" for p in seeds]),
             # and config/unicast_hosts.txt, read again at each round: where a node restarted on another
             # port is now, for the nodes that ran on (``place`` rewrites it)
             "discovery.seed_providers": "file",
             "cluster.initial_cluster_manager_nodes": json.dumps(names),
             # the disk's fill level is not ours to judge on a shared machine: never refuse shards for it
             "cluster.routing.allocation.disk.threshold_enabled": "false",
             # the parent circuit breaker counts the heap as the JVM reports it, garbage included: with
             # the serial collector a small heap trips it under load (429s); count what requests hold
             "indices.breaker.total.use_real_memory": "false"}
    return "".join(f"{k}: {v}\n" for k, v in lines.items())


def place(state: dict, nodes: list[dict], own: bool = True) -> None:
    """Ports for ``nodes`` (``own``: their own where free, a new node's 9200 + i and 9300 + i where
    free; else any free), their settings files, every node's seed file (the running ones' too); the
    cluster's URL."""
    taken = {port for node in state["nodes"] if node not in nodes for port in (node["http"], node["transport"])}
    for i, node in enumerate(state["nodes"]):
        if node in nodes:
            for key, base in (("http", HTTP_PORT), ("transport", TRANSPORT_PORT)):
                node[key] = free_port((node[key] or base + i) if own else 0, taken)
                taken.add(node[key])
    seeds, names = [node["transport"] for node in state["nodes"]], [node["name"] for node in state["nodes"]]
    for node in nodes:
        home = Path(node["home"])
        (home / "config").mkdir(parents=True, exist_ok=True)
        (home / "config" / "opensearch.yml").write_text(
            node_config(node["name"], node["http"], node["transport"], seeds, names, home), encoding="utf-8")
    for node in state["nodes"]:
        if (Path(node["home"]) / "config").is_dir():
            atomic_write_text(Path(node["home"]) / "config" / "unicast_hosts.txt",
                              "".join(f"127.0.0.1:{port}\n" for port in seeds))
    state["url"] = "http://" + ",".join(f"127.0.0.1:{node['http']}" for node in state["nodes"])
