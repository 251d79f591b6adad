"""Which node of a cluster URL to ask first: ``Nodes`` keeps the order of the URL, less the nodes
that failed lately, which go to the back of the list and stay there while they stay slow.

A node that refused a connection, dropped it, or did not answer within the client's timeouts is
*failing*: it is asked only after every other node of the URL (and still asked, so a URL whose
every node fails still reaches one that recovered). It goes back to the front only after it
answers a *probe* (``transport.PROBE``, within the client's connect timeout) on a background
thread, never with real work first: the first probe ``PROBE_AFTER_S`` after the
failure, then each one twice as late, up to ``PROBE_MAX_S``, while it keeps failing. A request it
answers in time while at the back (every other node failed too) brings it back as well.

The first failure of a node is a warning naming the node, the request and why, once another node
has answered that request (when none does, the request's error names each node and why); its
recovery is logged at info level.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

PROBE_AFTER_S = 5.0  # a failing node's first probe, this long after it failed
PROBE_MAX_S = 60.0  # probes back off, doubling, to one every this many seconds
log = logging.getLogger(__name__)

Host = tuple[str, int]


class Nodes:
    """The nodes of one URL, in the order to ask them (thread-safe). ``probe(host)``: whether the
    node answers a short request in time (it runs on a thread of its own)."""

    def __init__(self, hosts: tuple[Host, ...], probe: Callable[[Host], bool]):
        self.hosts, self._probe = hosts, probe
        self._failing: dict[Host, tuple[float, float]] = {}  # host: (when to probe it next, the wait after that)
        self._probing: set[Host] = set()
        self._lock = threading.Lock()

    def order(self) -> list[Host]:
        """The URL's nodes, the failing ones last (in the URL's order each); a failing node whose
        probe is due is probed on a background thread."""
        now = time.monotonic()
        with self._lock:
            failing = [h for h in self.hosts if h in self._failing]
            due = [h for h in failing if self._failing[h][0] <= now and h not in self._probing]
            self._probing.update(due)
        for host in due:
            threading.Thread(target=self._probed, args=(host,), daemon=True, name=f"probe-{host[0]}:{host[1]}").start()
        return [h for h in self.hosts if h not in failing] + failing

    def failing(self) -> list[Host]:
        with self._lock:
            return [h for h in self.hosts if h in self._failing]

    def failed(self, host: Host) -> bool:
        """``host`` did not answer: to the back of the list. Whether it was not failing before."""
        with self._lock:
            first = host not in self._failing
            if first:
                self._failing[host] = (time.monotonic() + PROBE_AFTER_S, PROBE_AFTER_S)
        return first

    @staticmethod
    def skipped(host: Host, what: str, why: str) -> None:
        """The warning that ``host``, which had not failed before, did not answer ``what`` (``why``)
        and another node did."""
        log.warning("node %s:%d of the cluster did not answer %s (%s); the other nodes of the URL are asked first "
                    "until it answers again", host[0], host[1], what, why)

    def answered(self, host: Host) -> None:
        """``host`` answered a request in time: back to its place in the URL's order."""
        with self._lock:
            was = self._failing.pop(host, None)
        if was is not None:
            log.info("node %s:%d of the cluster answers again", host[0], host[1])

    def _probed(self, host: Host) -> None:
        try:
            ok = self._probe(host)
        except Exception:  # noqa: BLE001  (a probe that fails in any way is a node still failing)
            ok = False
        with self._lock:
            self._probing.discard(host)
            if ok:
                was = self._failing.pop(host, None)
            elif host in self._failing:
                wait = min(self._failing[host][1] * 2, PROBE_MAX_S)
                self._failing[host] = (time.monotonic() + wait, wait)
        if ok and was is not None:
            log.info("node %s:%d of the cluster answers again", host[0], host[1])
