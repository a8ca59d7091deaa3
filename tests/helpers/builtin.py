"""The built-in programs as the tests use them: their references and cached reference fingerprints.
A module of its own (not conftest.py), so tests import it like any module."""

from __future__ import annotations

from functools import cache

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
