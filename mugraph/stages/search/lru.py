"""A least-recently-used cache bounded by the total weight of what it holds.

A searcher keeps the nodes and expansions it replayed or left open, for the next task's path,
which most often starts the same way. Counted by entries, such a cache held a worker's memory hostage: one block
structure node near the root carries thousands of rows, each with its op and macro tables, and 256
of them took a lora worker past 6 GB. Weighed by rows (or children), the cache keeps the many small
nodes that paths share and lets the few huge ones go first when it is full.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class WeightedLRU(Generic[K, V]):
    """At most `limit` total weight (`weigh(value)`, at least 1 each); the least recently used
    entries go first, and an entry heavier than the limit is not kept at all."""

    def __init__(self, limit: int, weigh: Callable[[V], int]) -> None:
        self.limit = limit
        self._weigh = weigh
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.weight = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self.weight -= old[1]
        w = max(1, self._weigh(value))
        if w > self.limit:
            return
        self._items[key] = (value, w)
        self.weight += w
        self._fit()

    def resize(self, limit: int) -> None:
        """Hold at most `limit` weight from now on, the least recently used entries dropped first."""
        self.limit = limit
        self._fit()

    def _fit(self) -> None:
        while self.weight > self.limit:
            _, (_, dropped) = self._items.popitem(last=False)
            self.weight -= dropped

    def values(self) -> list[V]:
        return [v for v, _ in self._items.values()]
