"""``LRU``: a mapping of bounded size that forgets the entry used longest ago, for every cache a
client can grow (a document frequency per query word, in process and on a cluster).

Thread-safe: an insertion holds one lock for its few dictionary operations; a lookup takes none
(it is on search's hot path: each query checks its terms), each of its steps atomic under the GIL.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

# Document frequencies kept per index: 2**18 entries (a str key and an int each, about 40 MB at
# most for long words): far past a model's vocabulary, so known terms stay; a flood of new words
# only ever costs this much.
DF_ENTRIES = 1 << 18


class LRU:
    """At most ``size`` entries; ``get`` refreshes an entry, ``put`` past the size drops the oldest."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"an LRU holds at least one entry, not {size}")
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, default=None):
        # No lock: each dict operation is atomic under the GIL, and a ``put`` that drops ``key``
        # between the two only makes this a miss or leaves it unrefreshed (a cache's usual race).
        try:
            value = self._items[key]
        except KeyError:
            return default
        try:
            self._items.move_to_end(key)
        except KeyError:
            pass
        return value

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
