"""Typed errors of the IR. Each message names the op and the shapes involved."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class MugraphError(Exception):
    """An error meant for a person: the CLI prints its message and exits with status 2."""


class IRError(MugraphError, ValueError):
    """A graph violates one of the IR's validity rules."""


class RankError(IRError):
    """A tensor has no dims, a non-positive dim, or more than four dims."""


class ShapeError(IRError):
    """Operand shapes do not fit the op (broadcasting, matmul, concat, reduction dim)."""


class DTypeError(IRError):
    """Operands of one op have different dtypes."""


class MappingError(IRError):
    """A block graph's grid, imap, fmap, for-loop range or omap is invalid."""


class AccumulationError(IRError):
    """A block op mixes tensors before and after the for-loop accumulation."""


class BlockOutputLimitError(IRError):
    """A block graph has more outputs than allowed."""


class SharedMemoryError(IRError):
    """A block graph's shared-memory estimate exceeds the limit."""


class DeviceMemoryError(IRError):
    """The kernel graph's device tensors exceed the device-memory limit."""


class GraphStructureError(IRError):
    """A tensor from another graph, a bad input list, a closed graph modified, a bad attribute."""


class SchemaError(MugraphError, ValueError):
    """A stored graph does not follow the JSON schema; the message names the field."""


def warning_line(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
) -> str:
    """A warning as the command line prints it (`warnings.formatwarning`): one line, no source."""
    return f"mugraph: warning: {message}\n"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """ " (did you mean 'x'?)" for the choice closest to a mistyped `word`, or "" where none is close:
    a message names the likely one before listing them all."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
