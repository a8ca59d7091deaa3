"""Tensor values that candidate μGraphs share, kept between fingerprints and found by structure.

Candidates of one search differ in a few ops and share the rest: the same accumulated block-level
product X·W under one grid, imaps, fmaps and for-loop range; the same pre-defined X·W. A tensor's
value is a function of its *structure*: the op that made it, the op's attributes, and its
operands' structures, down to the program inputs (and for a block input, the device tensor it
tiles, its imap and fmap, the grid and the for-loop range). So the interpreter names every tensor
by an interned structural key and, with a cache, reuses the values of accumulators, post-loop
ops, block outputs and kernel ops that an earlier candidate computed. One cache serves one set of
inputs (one seed), since values depend on them.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from mugraph.stages.verify.algebra import Array

DEFAULT_MAX_BYTES = 256 << 20
MAX_KEYS = 500_000  # interned structures before the cache starts over (bounds its own memory)


class ValueCache:
    """Values by structural key, least recently used first out once `max_bytes` is exceeded."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._ids: dict[Hashable, int] = {}
        self._values: OrderedDict[int, Array] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def key(self, *parts: Hashable) -> int:
        """A small integer naming this structure (parts are op kinds, attributes, operand keys)."""
        found = self._ids.get(parts)
        if found is None:
            found = self._ids[parts] = len(self._ids)
        return found

    def content_key(self, value: Array) -> int:
        """A small integer naming this host array's contents (shape, dtype and a 128-bit BLAKE2b digest
        of its bytes): values that different structures computed alike share it."""
        data = np.ascontiguousarray(value)
        digest = hashlib.blake2b(data.data, digest_size=16).digest()
        return self.key("content", data.shape, data.dtype.str, digest)

    def start(self) -> None:
        """Call before an evaluation: forget everything once the key table grows too large."""
        if len(self._ids) > MAX_KEYS:
            self._ids.clear()
            self._values.clear()
            self._bytes = 0

    def get(self, key: int) -> Array | None:
        value = self._values.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._values.move_to_end(key)
        return value

    def put(self, key: int, value: Array) -> None:
        size = int(value.nbytes)
        if size > self.max_bytes or key in self._values:
            return
        self._values[key] = value
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, old = self._values.popitem(last=False)
            self._bytes -= int(old.nbytes)

    @property
    def nbytes(self) -> int:
        return self._bytes
