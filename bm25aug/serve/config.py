"""What ``bm25aug serve`` serves and its limits: one ``ServeConfig``, from flags or a YAML file.

Every default is written here once; the command line reads them from ``ServeConfig``. A config
file holds the same settings (``indexes`` maps a name to its index and, optionally, its model)::

    indexes:
      scifact: {index: indexes/scifact.flat, model: general, dense: bge-small-en-v1.5}
      nfcorpus: {index: indexes/nfcorpus.flat}
    fusion: rrf
    port: 8081
    max_hits: 10000
    allowed_hosts: [localhost, 127.0.0.1, "[::1]", search.example.com]
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.limits import JAVA_INT_MAX, MAX_CLAUSES, MAX_QUERY_CHARS, RUNTIMES, check_choice
from bm25aug.bm25_defaults import B, K1
from bm25aug.search.hybrid import DEFAULT_FUSION, Fusion

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # an index name is one URL path segment
ENTRY_KEYS = ("index", "model", "dense")  # what an entry of a config file's ``indexes`` may hold
# The names a browser on this machine uses for a loopback server, any port (as the mcp SDK's
# streamable-HTTP transport allows by default): a page from anywhere else is refused (DNS rebinding).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True)
class IndexSpec:
    """One served index: its name in URLs, its folder (or Pyserini prebuilt name), and optionally
    the model folder that rewrites its queries and the dense model it is fused with (methods dense
    and hybrid; a flat index folder)."""

    name: str
    index: str
    model: str | None = None
    dense: str | None = None


@dataclass
class ServeConfig:
    """The server's settings (see ``docs/usage-serve.md`` for what each one trades)."""

    indexes: list[IndexSpec] = field(default_factory=list)
    host: str = "127.0.0.1"  # loopback: put a proxy in front to serve other machines
    port: int = 8081  # Pyserini's and Anserini's REST servers' port
    max_hits: int = 10_000  # the most hits one answer holds (Elasticsearch's max_result_window); more: a 400
    max_query_chars: int = 2048  # a longer query is refused (400), not truncated
    max_batch: int = 32  # queries a micro-batch
    max_wait_ms: float = 2.0  # how long a batch waits for more requests, under concurrent load only
    max_queue: int = 1024  # requests waiting beyond this are refused with 503 and Retry-After
    workers: int = 2  # batches in flight per index and method (one encodes while one searches)
    threads: int = max(1, os.cpu_count() or 1)  # Java search threads a batch
    doc_cache: int = 65_536  # stored documents kept per index (a cold read decompresses a block)
    retry_after: int = 1  # seconds a 503 asks the client to wait
    shutdown_s: int = 30  # how long a stop waits for in-flight requests
    runtime: str = RUNTIMES[0]  # the query encoder's runtime
    k1: float = K1
    b: float = B
    # hybrid's fusion (bm25aug.search.hybrid.Fusion), for the indexes served with a dense model
    fusion: str = DEFAULT_FUSION.method
    fusion_weight: float | None = None  # interpolation's default, bm25aug.search.hybrid.INTERPOLATION_WEIGHT
    fusion_depth: int = DEFAULT_FUSION.depth
    # Host and Origin headers answered (others: 421, 403); "*" allows any, for use behind a proxy
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    allowed_origins: tuple[str, ...] = tuple(f"http://{host}" for host in LOOPBACK_HOSTS)
    header_timeout_s: float = 10.0  # a connection's request (head and body) must arrive within this
    max_connections: int = 2048  # open connections; past it the oldest idle one is closed
    send_timeout_s: float = 10.0  # an answer left standing unread this long is dropped, with the connection
    unread_budget_mb: int = 256  # answers waiting on slow readers, all together; past it the longest waiting is dropped
    max_terms: int = 1024  # terms of one weighted query (Lucene's default clause limit)
    max_body_bytes: int = 1 << 20  # a request body (the weighted-term POST's JSON); larger: a 413

    def __post_init__(self) -> None:
        check_choice("query encoder runtime", self.runtime, RUNTIMES)
        fusion = Fusion(self.fusion, self.fusion_weight, self.fusion_depth)  # checked: one line naming the setting
        if fusion != DEFAULT_FUSION and not any(spec.dense for spec in self.indexes):
            raise UserError("fusion settings are for indexes served with --dense (methods dense and hybrid), and none "
                            "is; fix: add --dense NAME=MODEL, or drop the fusion settings")
        for name, low, high in (("port", 0, 65535), ("max_hits", 1, JAVA_INT_MAX), ("max_batch", 1, 4096),
                                ("max_queue", 1, 1_000_000), ("workers", 1, 64), ("threads", 1, 1024),
                                ("max_query_chars", 1, MAX_QUERY_CHARS), ("doc_cache", 0, 100_000_000),
                                ("retry_after", 1, 3600), ("shutdown_s", 0, 3600), ("max_connections", 1, 1_000_000),
                                ("max_terms", 1, MAX_CLAUSES), ("max_body_bytes", 1024, 1 << 30),
                                ("unread_budget_mb", 1, 1 << 20)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise UserError(f"serve setting {name} = {value!r} is out of range; fix: use an integer from "
                                f"{low:,} to {high:,}")
        for name, high in (("max_wait_ms", 1000), ("header_timeout_s", 3600), ("send_timeout_s", 3600)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high \
                    or (name != "max_wait_ms" and value <= 0):
                raise UserError(f"serve setting {name} = {value!r} is out of range; fix: use a number from "
                                f"{'0' if name == 'max_wait_ms' else 'above 0'} to {high}")
        self.allowed_hosts = _names("allowed_hosts", self.allowed_hosts)
        self.allowed_origins = _names("allowed_origins", self.allowed_origins)
        names = [spec.name for spec in self.indexes]
        if repeated := next((n for n in names if names.count(n) > 1), None):
            raise UserError(f"index name {repeated!r} is given twice; fix: give each served index its own name")


def _names(setting: str, value) -> tuple[str, ...]:
    """A list of host names or origins (a lone string is a list of one), each one word."""
    values = (value,) if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not values or \
            not all(isinstance(v, str) and v and len(v.split()) == 1 and v.strip() == v for v in values):
        example = "localhost search.example.com" if setting == "allowed_hosts" else "https://app.example.com"
        raise UserError(f"serve setting {setting} = {value!r} is not a list of names; fix: pass e.g. "
                        f"--{setting.replace('_', '-')} {example} (or '*' for any, behind a proxy that checks it)")
    return tuple(v.lower() for v in values)


def parse_pairs(values: list[str] | None, option: str) -> list[tuple[str | None, str]]:
    """``NAME=PATH`` (or a bare ``PATH``) flags as ``(name or None, path)``."""
    pairs = []
    for value in values or []:
        name, eq, path = value.partition("=")
        if not eq or "://" in name:  # a bare cluster URL, whose query string may hold `=` (?field=body)
            name, path = None, value
        if not path or (name is not None and not NAME.match(name)):
            raise UserError(f"{option} {value!r} is not NAME=PATH; fix: pass e.g. {option} scifact=indexes/scifact.flat "
                            f"(a name of letters, digits, '.', '_' and '-')")
        pairs.append((name, path))
    return pairs


def index_specs(index_flags: list[str] | None, model_flags: list[str] | None,
                dense_flags: list[str] | None = None) -> list[IndexSpec]:
    """``--index NAME=PATH``, ``--model NAME=PATH`` and ``--dense NAME=MODEL`` flags as ``IndexSpec``s
    (a bare index path is named after its folder; a bare model goes with the only index)."""
    indexes = [(name or Path(path.split("?", 1)[0].rstrip("/")).name, path)
               for name, path in parse_pairs(index_flags, "--index")]
    for name, _ in indexes:
        if not NAME.match(name):
            raise UserError(f"index name {name!r} cannot be a URL path segment; fix: name it, --index NAME=PATH")
    models, dense = (_per_index(flags, option, [n for n, _ in indexes])
                     for flags, option in ((model_flags, "--model"), (dense_flags, "--dense")))
    return [IndexSpec(name, path, models.get(name), dense.get(name)) for name, path in indexes]


def _per_index(flags: list[str] | None, option: str, names: list[str]) -> dict[str, str]:
    """``option NAME=VALUE`` flags by index name (a bare VALUE: the only index's)."""
    found: dict[str, str] = {}
    for name, path in parse_pairs(flags, option):
        if name is None:
            if len(names) != 1:
                raise UserError(f"{option} {path} names no index and {len(names)} are served; fix: pass "
                                f"{option} NAME={path} with NAME one of the --index names")
            name = names[0]
        if name not in names:
            raise UserError(f"{option} {name}={path}: no --index is named {name!r}; fix: use one of "
                            f"{', '.join(names) or '(none: add --index NAME=PATH)'}")
        if name in found:
            raise UserError(f"{option} is given twice for index {name!r} ({found[name]} and {path}); fix: give "
                            f"each index one {option}, or serve the other under its own --index name")
        found[name] = path
    return found


def load_config(path: str | Path) -> ServeConfig:
    """A ``ServeConfig`` from a YAML file (see the module docstring for its shape)."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"cannot read the serve config {path} ({type(e).__name__}); fix: pass a readable YAML "
                        f"file (see docs/usage-serve.md)") from None
    known = {f.name for f in dataclasses.fields(ServeConfig)}
    if not isinstance(data, dict) or (unknown := sorted(set(data) - known)):
        what = f"unknown settings {unknown}" if isinstance(data, dict) else "not a mapping"
        raise UserError(f"{path}: {what}; fix: use the settings {', '.join(sorted(known))}")
    entries = data.pop("indexes", None) or {}
    if not isinstance(entries, dict) or not all(isinstance(e, dict) and isinstance(e.get("index"), str)
                                                for e in entries.values()):
        raise UserError(f"{path}: indexes must map a name to {{index: PATH, model: PATH}}; fix: see docs/usage-serve.md")
    for name, entry in entries.items():
        if unknown := sorted(map(str, set(entry) - set(ENTRY_KEYS))):
            raise UserError(f"{path}: the entry of index {name!r} has unknown keys {unknown}; fix: use the keys "
                            f"{', '.join(ENTRY_KEYS)}")
        for key in ("model", "dense"):
            if not isinstance(entry.get(key, ""), (str, type(None))):
                raise UserError(f"{path}: the {key} of index {name!r} is not a name or path; fix: write {key}: PATH")
    flags = [f"{name}={entry['index']}" for name, entry in entries.items()]
    models, dense = ([f"{name}={entry[key]}" for name, entry in entries.items() if entry.get(key)]
                     for key in ("model", "dense"))
    try:
        return ServeConfig(indexes=index_specs(flags, models, dense), **data)
    except TypeError as e:
        raise UserError(f"{path}: {e}; fix: see docs/usage-serve.md") from None
