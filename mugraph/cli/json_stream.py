"""`mugraph optimize --json`'s event stream ends with a closing event on every path: `done` where the
run ends (complete or stopped at its time limit), else one `error` event saying, in the one line stderr
gets, why the command failed or stopped (bad input, a full disk, an interrupt, a fault of mugraph).
A reader of the stream waits for one of the two and never needs the exit status to know it ended.

The stream opens as soon as click reads `--json` (an eager option, read before any other option is
checked), so a bad option value ends it too; a command line click cannot parse at all is looked at
word by word. Process-wide state: one command runs per process, and `main` resets it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence

import click

from mugraph.pipeline.events import ErrorEvent, ErrorKind

# what a command line that streams its events names itself and its flag
STREAMING = {"optimize": "--json"}


class _Stream:
    """Whether `--json` asked for the stream (`opened`) and whether its closing event is out (`closed`)."""

    def __init__(self) -> None:
        self.opened = False
        self.closed = False


_STREAM = _Stream()


def reset() -> None:
    """A new command (`main` called again in one process, as tests do)."""
    _STREAM.opened = _STREAM.closed = False


def open_on_flag(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """The `--json` option's callback (eager: read before the options that may be refused)."""
    if value:
        _STREAM.opened = True
    return value


def closed() -> None:
    """The `done` event is out: nothing more follows it."""
    _STREAM.closed = True


def asked_for(args: Sequence[str]) -> bool:
    """Whether a command line click could not parse asked for a stream: its command streams and the
    flag is among its words (before a `--`)."""
    words = list(args[: list(args).index("--")] if "--" in args else args)
    return bool(words) and words[0] in STREAMING and STREAMING[words[0]] in words[1:]


def error_event(message: str, exit_status: int, kind: ErrorKind) -> ErrorEvent:
    return {"event": "error", "error": message, "kind": kind, "exit_status": exit_status}


def close_with_error(message: str, exit_status: int, kind: ErrorKind, args: Sequence[str] = ()) -> None:
    """Print the `error` event on stdout where a stream is open and not yet closed (`args`: the
    command line, looked at where click stopped before reading `--json`). A stdout that is gone takes
    nothing."""
    if _STREAM.closed or not (_STREAM.opened or (kind == "usage" and asked_for(args))):
        return
    _STREAM.closed = True
    with contextlib.suppress(OSError, ValueError):
        click.echo(json.dumps(error_event(message, exit_status, kind)))
