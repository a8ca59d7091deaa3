"""The built-in programs by name (the benchmarks and the transformer block register themselves on import)."""

from __future__ import annotations

from mugraph.ir.errors import MugraphError, did_you_mean
from mugraph.programs import benchmarks, transformer  # noqa: F401  (register on import)
from mugraph.programs.program import REGISTRY, GraphBuilder, Program, register

__all__ = ["GraphBuilder", "Program", "builtin_programs", "get_builtin", "register"]


def builtin_programs() -> dict[str, Program]:
    return dict(sorted(REGISTRY.items()))


def get_builtin(name: str) -> Program:
    programs = builtin_programs()
    if name not in programs:
        raise MugraphError(
            f"unknown program {name!r}{did_you_mean(name, programs)}; built-in programs are: "
            f"{', '.join(programs)} (or pass a .py or .json file)"
        )
    return programs[name]
