"""Built-in reference programs (Mirage's benchmarks) with their expert μGraphs, and user programs."""

from mugraph.programs.loader import load_program, resolve_program, resolve_recorded_program
from mugraph.programs.registry import Program, builtin_programs, get_builtin

__all__ = [
    "Program",
    "builtin_programs",
    "get_builtin",
    "load_program",
    "resolve_program",
    "resolve_recorded_program",
]
