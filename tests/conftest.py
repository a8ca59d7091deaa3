"""Shared fixtures: the built-in programs and cached reference fingerprints."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from mugraph.ir.graph import KernelGraph
from mugraph.programs import builtin_programs
from mugraph.stages.verify.check import ReferenceFingerprints

PROGRAMS = builtin_programs()
EXPERTS = [(name, label) for name, prog in PROGRAMS.items() for label in prog.experts]


@cache
def reference(name: str) -> KernelGraph:
    return PROGRAMS[name].reference()


@cache
def reference_fingerprints(name: str, seeds: tuple[int, ...] = (0, 1, 2)) -> ReferenceFingerprints:
    return ReferenceFingerprints(reference(name), seeds)


@pytest.fixture
def own_redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server for one test (a real process)."""
    from mugraph.storage.redis_server import EmbeddedRedis

    with EmbeddedRedis(tmp_path / "own-redis") as server:
        yield server.url
