"""Small real μGraphs for tests of the run store, whose found records are content-addressed: a
record's name must be the canonical digest of its graph."""

from __future__ import annotations

import functools
import zlib

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps


@functools.cache
def mugraph_of(key: str) -> tuple[str, str]:
    """(canonical digest, graph JSON) of a one-op kernel graph of its own for each `key` (the key
    picks the input's shape)."""
    h = zlib.crc32(key.encode())
    g = KernelGraph()
    g.mark_output(g.exp(g.new_input((1 + h % 1024, 1 + (h >> 10) % 1024), name="x")), "y")
    return canonical_digest(g), dumps(g)


def digest_of(key: str) -> str:
    return mugraph_of(key)[0]


def graph_of(key: str) -> str:
    return mugraph_of(key)[1]
