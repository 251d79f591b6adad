"""Which node of a cluster URL to ask first: ``Nodes`` keeps the order of the URL, less the nodes
that failed lately, which go to the back of the list and stay there while they stay slow;
``ProbedPool`` is that order as opensearch-py's connection pool (``connection_pool_class``).

A node that refused a connection, dropped it, or did not answer within the client's timeouts is
*failing*: it is asked only after every other node of the URL (and still asked, so a URL whose
every node fails still reaches one that recovered; among failing nodes, the one that failed
longest ago first). It goes back to the front only after it answers a *probe* (``PROBE``, within
the client's connect timeout) on a background thread, never with real work first: the first probe
``PROBE_AFTER_S`` after the failure, then each one twice as late, up to ``PROBE_MAX_S``, while it
keeps failing. A request it answers in time while at the back (every other node failed too)
brings it back as well. opensearch-py's own pool would instead send real work to a dead node
again once its ``dead_timeout`` is over, and pick nodes at random.

The first failure of a node is a warning naming it, once another node has answered (when none
does, the request's error says so); its recovery is logged at info level.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable

from opensearchpy import ConnectionPool
from opensearchpy.exceptions import ConnectionError as NoAnswer, TransportError

PROBE_AFTER_S = 5.0  # a failing node's first probe, this long after it failed
PROBE_MAX_S = 60.0  # probes back off, doubling, to one every this many seconds
PROBE = "/_cluster/health"  # GET: answered at once by a node whose cluster has a working manager
log = logging.getLogger(__name__)


class Nodes:
    """The nodes of one URL, in the order to ask them (thread-safe). ``probe(node)``: whether the
    node answers a short request in time (it runs on a thread of its own); ``name(node)``: how
    messages name it."""

    def __init__(self, hosts: tuple[Hashable, ...], probe: Callable[[Hashable], bool],
                 name: Callable[[Hashable], str] = str):
        self.hosts, self._probe, self.name = hosts, probe, name
        # node: (when to probe it next, the wait after that, when it last failed: later is asked later)
        self._failing: dict[Hashable, tuple[float, float, int]] = {}
        self._probing: set[Hashable] = set()
        self._lock = threading.Lock()
        self._count = itertools.count()
        self._unsaid = threading.local()  # nodes that failed first in this thread, not yet warned about

    def order(self) -> list:
        """The URL's nodes, the failing ones last (the one that failed longest ago first); a failing
        node whose probe is due is probed on a background thread."""
        now = time.monotonic()
        with self._lock:
            failing = sorted((h for h in self.hosts if h in self._failing), key=lambda h: self._failing[h][2])
            due = [h for h in failing if self._failing[h][0] <= now and h not in self._probing]
            self._probing.update(due)
        for host in due:
            threading.Thread(target=self._probed, args=(host,), daemon=True, name=f"probe-{self.name(host)}").start()
        return [h for h in self.hosts if h not in set(failing)] + failing

    def failing(self) -> list[str]:
        """The names of the nodes asked last now."""
        with self._lock:
            return [self.name(h) for h in self.hosts if h in self._failing]

    def failed(self, host: Hashable) -> bool:
        """``host`` did not answer: to the very back of the list. Whether it was not failing before
        (then warned about once another node answers this thread)."""
        with self._lock:
            was = self._failing.get(host)
            probe_at, wait = was[:2] if was else (time.monotonic() + PROBE_AFTER_S, PROBE_AFTER_S)
            self._failing[host] = (probe_at, wait, next(self._count))
        if was is None:
            self._unsaid.__dict__.setdefault("hosts", []).append(host)
        return was is None

    def answered(self, host: Hashable) -> None:
        """``host`` answered a request in time: back to its place in the URL's order (and the nodes
        that failed before it in this thread are warned about)."""
        with self._lock:
            was = self._failing.pop(host, None)
        for failed in self._unsaid.__dict__.pop("hosts", []):
            if failed != host:
                log.warning("node %s of the cluster did not answer; the other nodes of the URL are asked first "
                            "until it answers a probe", self.name(failed))
        if was is not None:
            log.info("node %s of the cluster answers again", self.name(host))

    def _probed(self, host: Hashable) -> None:
        try:
            ok = self._probe(host)
        except Exception:  # noqa: BLE001  (a probe that fails in any way is a node still failing)
            ok = False
        with self._lock:
            self._probing.discard(host)
            was = self._failing.get(host)
            if ok:
                self._failing.pop(host, None)
            elif was is not None:
                wait = min(was[1] * 2, PROBE_MAX_S)
                self._failing[host] = (time.monotonic() + wait, wait, was[2])
        if ok and was is not None:
            log.info("node %s of the cluster answers again", self.name(host))


class ProbedPool(ConnectionPool):
    """opensearch-py's connection pool for bm25aug's own clients: connections asked in the URL's
    order (never shuffled, never round robin), a failed one last until it answers a probe
    (``Nodes``). The transport's ``mark_dead``/``mark_live`` report each answer."""

    def __init__(self, connections, **options):
        super().__init__(connections, **{**options, "randomize_hosts": False})
        self.nodes = Nodes(tuple(self.orig_connections), _probe, lambda c: c.host.split("://", 1)[-1])

    def get_connection(self):
        return self.nodes.order()[0]

    def mark_dead(self, connection, now: float | None = None) -> None:
        self.nodes.failed(connection)

    def mark_live(self, connection) -> None:
        self.nodes.answered(connection)

    def resurrect(self, force: bool = False):
        return None  # a failed node comes back by its probe (``Nodes``), never by a timer

    def close(self) -> None:
        for connection in self.orig_connections:
            connection.close()


def _probe(connection) -> bool:
    """Whether the node answers ``GET PROBE`` below status 500 (401 and 403 too) within the
    connection's connect timeout."""
    try:
        connection.perform_request("GET", PROBE, timeout=connection.timeout.connect_timeout)
    except NoAnswer:
        return False
    except TransportError as e:
        return isinstance(e.status_code, int) and e.status_code < 500
    return True
