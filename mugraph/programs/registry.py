"""Programs: a reference tensor program plus the hand-written (expert) μGraphs known to equal it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph

GraphBuilder = Callable[[], KernelGraph]


@dataclass(frozen=True)
class Program:
    """A program to optimise. `experts` maps a label to a builder of an equivalent μGraph; the
    first one is *the* expert that searches must rediscover."""

    name: str
    description: str
    preset: str
    reference: GraphBuilder
    experts: Mapping[str, GraphBuilder] = field(default_factory=dict)
    source: str = "built-in"


_REGISTRY: dict[str, Program] = {}


def register(program: Program) -> Program:
    if program.name in _REGISTRY:
        raise ValueError(f"program {program.name!r} registered twice")
    _REGISTRY[program.name] = program
    return program


def builtin_programs() -> dict[str, Program]:
    from mugraph.programs import benchmarks, transformer  # noqa: F401  (register on import)

    return dict(sorted(_REGISTRY.items()))


def get_builtin(name: str) -> Program:
    programs = builtin_programs()
    if name not in programs:
        raise MugraphError(
            f"unknown program {name!r}; built-in programs are: {', '.join(programs)} "
            "(or pass a .py or .json file)"
        )
    return programs[name]
