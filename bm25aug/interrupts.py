"""Ctrl-C and SIGTERM as a ``KeyboardInterrupt`` that lets cleanup run.

The JVM is started with ``-Xrs`` (``bm25aug.lucene.jvm``), so both signals reach Python. The command
line turns SIGTERM into the same ``KeyboardInterrupt`` as Ctrl-C (``install``), so temporaries
are removed on the way out and it says how to continue. Training defers the interrupt to the end
of the step in flight (``deferred``, ``stop_point``): raised inside PyTorch's autograd engine it
printed "INTERNAL ASSERT FAILED" tracebacks instead of stopping. A second signal stops at once.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

_pending: list[int] = []
_installed: list[bool] = []


def installed() -> bool:
    """Whether the command line set the handlers up (a long Java call may then run in a thread
    that a Ctrl-C leaves behind, as the process exits; in a Python session it would not)."""
    return bool(_installed)


def _raise(signum, frame) -> None:
    raise KeyboardInterrupt


def install() -> None:
    """SIGTERM (a ``kill``, a job scheduler's stop) raises ``KeyboardInterrupt`` as Ctrl-C does."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)
        _installed.append(True)


@contextmanager
def deferred() -> Iterator[None]:
    """Inside the block a first SIGINT or SIGTERM is only recorded, and ``stop_point`` raises it;
    a second one raises at once. Outside the main thread (no signal arrives there) a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def record(signum, frame) -> None:
        if _pending:
            raise KeyboardInterrupt
        _pending.append(signum)

    saved = {s: signal.signal(s, record) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
        stop_point()  # one that came after the last stop point is not lost
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        _pending.clear()


def stop_point() -> None:
    """Raise the interrupt that ``deferred`` recorded, if any: a place where stopping is safe."""
    if _pending:
        _pending.clear()
        raise KeyboardInterrupt
