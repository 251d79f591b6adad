"""The package's shape, read from its source with ``ast`` (no import, no Java): no import cycle
among product modules, no import from a lower layer to a higher one (the layers are those of
docs/architecture.md#layers), every index satisfies the ``Index`` protocol, and no module or
function is over its size."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bm25aug"

# Lowest first. A module may import its own layer (without a cycle) and any layer below it; a
# module's layer is that of the longest prefix listed. docs/architecture.md#layers says the same.
LAYERS = [
    ("floor", ("bm25aug.errors", "bm25aug.io", "bm25aug.limits", "bm25aug.cache", "bm25aug.progress",
               "bm25aug.interrupts", "bm25aug.outputs", "bm25aug.recipes", "bm25aug.tokenization",
               "bm25aug.bm25_defaults", "bm25aug.ranking", "bm25aug.backend", "bm25aug.locations",
               "bm25aug.index_meta")),
    ("data", ("bm25aug.data",)),
    ("backends", ("bm25aug.lucene", "bm25aug.opensearch")),
    ("model", ("bm25aug.model",)),
    ("dense", ("bm25aug.dense",)),
    ("search", ("bm25aug.search",)),
    ("api", ("bm25aug",)),  # the package's own lazy exports (bm25aug/__init__.py)
    ("eval", ("bm25aug.eval",)),
    ("train", ("bm25aug.train",)),
    ("adapt", ("bm25aug.adapt", "bm25aug.reproduce")),
    ("serve", ("bm25aug.serve",)),
    ("cli", ("bm25aug.cli",)),
]
# The two backends are one layer, and neither needs the other, except that a cluster's index
# analyzes a query with Lucene's own analyzer, on purpose (parity).
BACKEND_BRIDGES = {("bm25aug.opensearch", "bm25aug.lucene.analysis")}
PENDING: set[tuple[str, str]] = set()  # imports across the backends still to move below them (none now)
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 80


def modules() -> dict[str, Path]:
    """Every product module by dotted name (a package by its own name)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _skipped(tree: ast.Module, types: bool) -> set[int]:
    """Nodes that never run as an import of the module: its ``__main__`` block (it runs only as
    a program) and, unless ``types``, its ``if TYPE_CHECKING:`` blocks (annotations only)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if test == "__name__ == '__main__'" or (not types and "TYPE_CHECKING" in test):
                skip |= {id(n) for n in ast.walk(node)}
    return skip


def imports(name: str, path: Path, known: dict[str, Path], types: bool = True) -> set[str]:
    """The product modules ``name`` imports anywhere in its source (module level or in a function)."""
    def owner(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip, found = _skipped(tree, types), set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {owner(a.name) for a in node.names if a.name.startswith("bm25aug")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            if base.startswith("bm25aug"):
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else owner(base) for a in node.names}
    return found - {None, name}


def graph(types: bool = True) -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known, types) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def layer(name: str) -> int:
    prefixes = [(len(p), rank) for rank, (_, members) in enumerate(LAYERS) for p in members
                if name == p or name.startswith(p + ".")]
    assert prefixes, f"{name} is in no layer; fix: place it in LAYERS here and in docs/architecture.md#layers"
    return max(prefixes)[1]


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Each import that goes up a layer, or between the backends other than by a bridge."""
    bad = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            low, high = layer(target), layer(source)
            if low > high:
                bad.append(f"{source} ({LAYERS[high][0]}) imports {target} ({LAYERS[low][0]})")
            elif LAYERS[high][0] == LAYERS[low][0] == "backends" and source.split(".")[1] != target.split(".")[1] \
                    and (source, target) not in PENDING \
                    and not any(source.startswith(s) and target == t for s, t in BACKEND_BRIDGES):
                bad.append(f"{source} imports {target}: the backends are apart except {BACKEND_BRIDGES}")
    return bad


def test_no_import_cycle_among_product_modules():
    """Imports that run (module level or inside a function); ``if TYPE_CHECKING:`` ones are
    annotations only and are left out."""
    assert cycles(graph(types=False)) == []


def test_no_import_goes_up_a_layer():
    """Type-only imports count here: a lower layer that names a higher one's type depends on it."""
    assert violations(graph()) == []


def test_every_pending_bridge_is_still_used():
    edges = graph()
    assert [p for p in sorted(PENDING) if p[1] not in edges.get(p[0], set())] == [], \
        "remove the entries bm25aug.opensearch no longer imports from PENDING"


def test_the_checks_catch_a_cycle_and_an_upward_import():
    edges = {"bm25aug.lucene.reader": {"bm25aug.search.bm25"}, "bm25aug.search.bm25": {"bm25aug.lucene.reader"},
             "bm25aug.opensearch.client": {"bm25aug.lucene.index"}, "bm25aug.opensearch.index": {"bm25aug.lucene.analysis"}}
    assert cycles(edges) == [["bm25aug.lucene.reader", "bm25aug.search.bm25"]]
    assert violations(edges) == ["bm25aug.lucene.reader (backends) imports bm25aug.search.bm25 (search)",
                                 f"bm25aug.opensearch.client imports bm25aug.lucene.index: the backends are apart "
                                 f"except {BACKEND_BRIDGES}"]
    with pytest.raises(AssertionError, match="in no layer"):
        layer("elsewhere.module")


def test_modules_and_functions_are_within_their_size():
    over = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if (n := len(source.splitlines())) > MAX_MODULE_LINES:
            over.append(f"{path.relative_to(ROOT)}: {n} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                over.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert over == []


def _members(cls) -> dict[str, object]:
    return {name: member for name, member in vars(cls).items() if not name.startswith("_")}


def _assert_satisfies(protocol, classes) -> None:
    """Each class has every method of ``protocol``, with the same parameters (read from the classes,
    so nothing is opened); attributes are set in ``__init__`` or on the class."""
    wanted = {n: m for n, m in _members(protocol).items() if callable(m)}
    attributes = set(getattr(protocol, "__annotations__", {}))
    for cls in classes:
        init = inspect.getsource(cls.__init__)
        missing = [n for n in wanted if not hasattr(cls, n)] + [
            a for a in attributes if not hasattr(cls, a) and f"self.{a}" not in init]
        assert missing == [], f"{cls.__name__} lacks {missing}"
        for name, member in wanted.items():
            want = list(inspect.signature(member).parameters)
            assert list(inspect.signature(getattr(cls, name)).parameters) == want, (cls.__name__, name)


def test_every_index_satisfies_the_index_protocol():
    """Both backends have every method of ``bm25aug.backend.Index``."""
    from bm25aug.backend import Index
    from bm25aug.lucene.reader import LuceneIndex
    from bm25aug.opensearch.index import OpenSearchIndex

    _assert_satisfies(Index, (LuceneIndex, OpenSearchIndex))


def test_both_cluster_index_layouts_satisfy_the_layout_protocol():
    """An index bm25aug made and a user's own (``?field=``) are searched through one ``Layout``."""
    from bm25aug.opensearch.layout import Layout, OwnLayout
    from bm25aug.opensearch.user_index import UserLayout

    _assert_satisfies(Layout, (OwnLayout, UserLayout))
