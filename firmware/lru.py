"""A bounded least-recently-used cache, for the caches on the submission hot path.

The driver remembers validated descriptors, the firmware decoded launches and operand
translations (a TLB's job). Each is bounded: when full, the entry used longest ago goes,
so a working set that fits stays cached however long the run (a cache that is cleared
in full when it fills makes every repeat a miss for a while).
"""
from __future__ import annotations

from collections import OrderedDict


class LRUCache:
    __slots__ = ("_data", "capacity", "evictions")

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"an LRU cache needs a capacity >= 1, got {capacity}")
        self._data: OrderedDict = OrderedDict()
        self.capacity = capacity
        self.evictions = 0

    def get(self, key):
        """The value cached for ``key`` (now the most recently used), or None."""
        data = self._data
        value = data.get(key)
        if value is not None:
            data.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        data = self._data
        data[key] = value
        data.move_to_end(key)
        if len(data) > self.capacity:
            data.popitem(last=False)
            self.evictions += 1

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key) -> bool:
        return key in self._data
