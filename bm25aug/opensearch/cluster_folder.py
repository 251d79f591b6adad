"""A local cluster's folder (``bm25aug cluster --root``): what bm25aug writes there, how it knows
the folder is its own, and how it removes what it wrote and nothing else.

The folder holds ``RECORD`` and one folder per node (``node-1``, ...: its settings, data and log).
The record is bm25aug's alone: its name, its ``"bm25aug_cluster": FORMAT`` key, the folder it was
made for (``root``) and each node's home inside that folder (``<root>/<name>``). A folder is a
cluster only with such a record; one without it (a ``cluster.json`` of someone else's, a user's
files) is refused in one line and nothing in it is read further, changed or removed. A missing or
empty folder holds no cluster. ``lock`` keeps two commands from working on one folder at once.

One cluster's folder never holds another's: ``alone`` refuses a folder inside one that holds a
``RECORD`` (``enclosing``; one with its own ``RECORD`` too, made before this was refused, is told
how to delete it or leave it stopped), and one that holds a ``RECORD`` below its own (``nested``),
whose ``delete`` would remove the other cluster's data from under its running nodes; ``remove``
refuses too, before it removes anything, when a node folder holds another ``RECORD``. (A node of
a nested cluster whose record is gone is found by its process: ``node_processes.inside``.)

The record names the OpenSearch version its nodes run (``opensearch``: chosen when the cluster was
made, kept for its life, as its data is that version's); a record written before versions were
recorded ran ``UNRECORDED``, which ``read`` fills in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock

from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, atomic_write_text, clean_stale, digest

RECORD = "bm25aug-cluster.json"
FORMAT = 1
FIELDS = ("bm25aug_cluster", "root", "url", "opensearch", "java", "build", "heap", "nodes")  # what the record holds
UNRECORDED = "2.19.6"  # the version of a cluster whose record names none (the only one before 3.x)
NODE_FIELDS = ("name", "http", "transport", "home", "pid")
NODE_NAME = re.compile(r"node-[1-9][0-9]{0,3}")
HEAP_SIZE = re.compile(r"[1-9][0-9]*[kKmMgGtT]?")  # what java's -Xms/-Xmx take
LOCKS = CACHE_ROOT / "cluster-locks"


def folder(root: str | Path) -> Path:
    """``--root`` as an absolute path with links resolved: the ``root`` a record names."""
    return Path(root).expanduser().resolve()


def foreign(root: Path, why: str) -> UserError:
    return UserError(f"{root} is not a cluster this command started ({why}); fix: pass another --root (bm25aug "
                     f"changes and removes nothing in that folder), or move your files out if the folder is yours "
                     f"to reuse")


def read(root: Path) -> dict | None:
    """The cluster recorded in ``root`` (its ``opensearch`` version filled in when the record has
    none); None when ``root`` is missing or empty; an error for a file or for a folder that holds
    anything else (no record, or one bm25aug did not write)."""
    if not root.exists():
        return None
    if not root.is_dir():
        raise UserError(f"--root {root} is a file, not a folder; fix: pass a cluster's folder, or a new one")
    record = root / RECORD
    if not record.exists() and not record.is_symlink():
        if not any(root.iterdir()):
            return None
        raise foreign(root, f"it holds no {RECORD}")
    try:
        if record.is_symlink() or not record.is_file():
            raise ValueError(f"{RECORD} is not a plain file")
        state = json.loads(record.read_text(encoding="utf-8"))
        _check(root, state)
    except (OSError, UnicodeDecodeError, ValueError) as e:  # (json's errors are ValueErrors)
        raise foreign(root, f"its {RECORD} is not bm25aug's: {' '.join(str(e).split())[:160]}") from None
    state.setdefault("opensearch", UNRECORDED)
    return state


def _check(root: Path, state) -> None:
    """A ``ValueError`` unless ``state`` is a record bm25aug wrote for ``root``."""
    if not isinstance(state, dict) or state.get("bm25aug_cluster") != FORMAT:
        raise ValueError(f'no "bm25aug_cluster": {FORMAT}')
    if state.get("root") != str(root):
        raise ValueError(f"it was made for {state.get('root')!r}, not this folder")
    nodes = state.get("nodes")
    if not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) for n in nodes):
        raise ValueError("no list of nodes")
    for node in nodes:
        name = node.get("name")
        if not isinstance(name, str) or not NODE_NAME.fullmatch(name) or node.get("home") != str(root / name):
            raise ValueError(f"node {name!r} has no home of its own in this folder")
        if not all(isinstance(node.get(k), int) and 0 <= node[k] < 65536 for k in ("http", "transport", "pid")):
            raise ValueError(f"node {name} has no ports or pid")
    if len({n["name"] for n in nodes}) != len(nodes):
        raise ValueError("two nodes share a name")
    if not all(isinstance(state.get(k), str) for k in ("url", "java", "build", "heap")):
        raise ValueError("no url, java, build or heap")
    if not isinstance(state.get("opensearch", UNRECORDED), str):
        raise ValueError("its opensearch version is not a string")
    if not HEAP_SIZE.fullmatch(state["heap"]):
        raise ValueError(f"heap {state['heap']!r} is not a Java heap size")


def new(root: Path, url: str, opensearch: str, java: str, build: str, heap: str, nodes: list[dict]) -> dict:
    return {"bm25aug_cluster": FORMAT, "root": str(root), "url": url, "opensearch": opensearch, "java": java,
            "build": build, "heap": heap, "nodes": nodes}


def write(root: Path, state: dict) -> None:
    """The record of ``state`` (its ``FIELDS`` only: what a command adds, such as ``running``, stays
    out), in one atomic write."""
    record = {k: state[k] for k in FIELDS}
    record["nodes"] = [{k: node[k] for k in NODE_FIELDS} for node in state["nodes"]]
    atomic_write_text(root / RECORD, json.dumps(record, indent=1))


def remove(root: Path, state: dict) -> list[str]:
    """Remove what the cluster wrote in ``root``: each node's folder, then the record (last, so that
    a removal cut short is finished by the next one), then ``root`` itself when nothing else is in
    it. The names of what was kept (files bm25aug did not write); empty when ``root`` is gone.
    Nothing is removed when a node folder holds another cluster's ``RECORD`` (an error)."""
    holding(root, state)
    for node in state["nodes"]:
        home = root / node["name"]
        if home.is_symlink():
            home.unlink()  # the link, not what it points to
        elif home.exists():
            shutil.rmtree(home)
    (root / RECORD).unlink(missing_ok=True)
    clean_stale(root / RECORD)  # the record's temporaries of a writer that was killed
    kept = sorted(entry.name for entry in root.iterdir())
    if not kept:
        root.rmdir()
    return kept


def enclosing(root: Path) -> Path | None:
    """The nearest folder above ``root`` that holds a ``RECORD`` (another cluster's folder, which its
    ``delete`` would remove with what is in it), or None."""
    for parent in root.parents:
        if (parent / RECORD).exists() or (parent / RECORD).is_symlink():
            return parent
    return None


def nested(root: Path, within: list[Path] | None = None) -> Path | None:
    """The first folder below ``root`` (in the folders ``within`` only, if given) that holds a
    ``RECORD``: another cluster's folder (``root``'s own record aside). Links are not followed."""
    for top in [root] if within is None else within:
        if top.is_symlink() or not top.is_dir():
            continue
        for path, folders, files in os.walk(top):
            if RECORD in files + folders and Path(path) != root:
                return Path(path)
    return None


def alone(root: Path, state: dict | None) -> None:
    """That the cluster in ``root`` (``state``; None: a new one) is neither inside another cluster's
    folder nor holds one: the ``delete`` of the outer one would remove the inner one's data."""
    if (outer := enclosing(root)) is not None and ((root / RECORD).exists() or (root / RECORD).is_symlink()):
        raise UserError(f"--root {root} holds a cluster (its own {RECORD}, made before bm25aug refused this) inside "
                        f"{outer}, another cluster's folder, and one cluster's folder never holds another's (deleting "
                        f"the outer one could remove the inner one's data), so it is not started there again; fix: "
                        f"`bm25aug cluster delete --root {root}` removes it and its data, or leave it stopped "
                        f"(`bm25aug cluster stop --root {root}`) with its data and start a cluster outside {outer}")
    if outer is not None:
        raise UserError(f"--root {root} is inside {outer}, another cluster's folder (it holds {RECORD}), and one "
                        f"cluster's folder never holds another's (deleting the outer one could remove the inner one's "
                        f"data); fix: pass a --root outside {outer}")
    if state is not None and (inner := nested(root)) is not None:
        raise UserError(f"{root} holds another cluster's folder, {inner} (with its own {RECORD}), so one cluster's "
                        f"`delete` would remove the other's data; fix: `bm25aug cluster delete --root {inner}` (or "
                        f"move that folder out of {root}) first")


def holding(root: Path, state: dict) -> None:
    """An error, naming it, when a node folder of the cluster in ``root`` holds another cluster's
    folder (a ``RECORD``): removing the node folder would remove that cluster's data."""
    if (inner := nested(root, [root / node["name"] for node in state["nodes"]])) is not None:
        raise UserError(f"{root}/{inner.relative_to(root).parts[0]} holds another cluster's folder, {inner} (with its "
                        f"own {RECORD}), which deleting the cluster in {root} would remove; fix: `bm25aug cluster "
                        f"delete --root {inner}` (or move that folder out) first; nothing was stopped or removed")


@contextmanager
def lock(root: Path) -> Iterator[None]:
    """Held while one command starts, stops or deletes the cluster in ``root`` (another waits). It
    lives in bm25aug's cache, not in ``root``: nothing is written into a folder before it is known
    to be a cluster's, or to be missing or empty."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    with FileLock(str(LOCKS / f"{digest(str(root).encode())[:16]}.lock")):
        yield
