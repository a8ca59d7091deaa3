"""Options more than one command takes, written once so their names, defaults and help agree."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from mugraph.ir.errors import MugraphError
from mugraph.programs import Program, resolve_program
from mugraph.stages.search.config import PRESETS
from mugraph.storage.memo.auth import MemoDirUnwritable
from mugraph.storage.memo.layered import LayeredMemo
from mugraph.storage.memo.session import verdict_memo

F = TypeVar("F", bound=Callable[..., Any])


def space_options(f: F) -> F:
    """`--preset` and `--set`: the search space of a command that searches or explains in this process."""
    f = click.option(
        "--set",
        "settings",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override one search limit, VALUE in JSON, e.g. --set 'grids=[[64,1,1]]' --set franges=[64]. Repeatable.",
    )(f)
    return click.option(
        "--preset", type=click.Choice(PRESETS), default=None, help="Search space preset (default: the program's own)."
    )(f)


def memo_options(f: F) -> F:
    """`--memo-url` and `--memo-dir`: the verdict memo of a command that runs the search or the oracle
    in this process (optimize has its own: its private memo lives beside the run store)."""
    f = click.option(
        "--memo-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("runs/memo"),
        show_default=True,
        help="Data directory of the private redis-server.",
    )(f)
    return click.option(
        "--memo-url",
        default=None,
        metavar="URL",
        envvar="MUGRAPH_MEMO_URL",
        help="Shared verdict memo: redis://HOST:PORT/DB, unix:///PATH, or 'local' (no server). "
        "Default: a private redis-server keeping its data in --memo-dir. Also read from $MUGRAPH_MEMO_URL "
        "(a Redis password out of the command line that `ps` shows).",
    )(f)


@contextmanager
def command_memo(memo_url: str | None, memo_dir: Path, valid_values: frozenset[bytes]) -> Iterator[LayeredMemo]:
    """`verdict_memo` for a command with `memo_options`: a memo directory it cannot make or write (a
    read-only working directory, where the default runs/memo lies) is refused with the options that
    go on without it."""
    with ExitStack() as stack:
        try:
            memo = stack.enter_context(verdict_memo(memo_url, memo_dir, valid_values))
        except MemoDirUnwritable as exc:
            raise MugraphError(
                f"{exc}; to go on, give --memo-url local (verdicts kept in this process only) or a --memo-dir "
                "you can write to"
            ) from None
        yield memo


def backend_option(help_text: str) -> Callable[[F], F]:
    """`--backend`: the array backend of fingerprints (the choices and default every command shares;
    the help says whose fingerprints)."""
    return click.option(
        "--backend",
        type=click.Choice(["auto", "numpy", "cupy"]),
        default="auto",
        show_default=True,
        help=help_text,
    )


def store_argument(f: F) -> F:
    """STORE: one run store. A shell glob such as `runs/rms_norm-*.zarr` (as README writes it) expands
    to every store of that program once there are several (another `--set`, a file edited): that is
    said, with the stores and the newest, rather than click's "unexpected extra argument"."""

    def one(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Path:
        if not values:
            raise click.MissingParameter(ctx=ctx, param=param)
        if len(values) > 1:
            newest = max(values, key=lambda p: os.stat(p).st_mtime if os.path.exists(p) else 0.0)
            given = ", ".join(values)
            raise click.UsageError(f"{len(values)} stores given ({given}); name one (the newest is {newest})", ctx)
        if not values[0].strip():
            raise click.UsageError("STORE is empty; give a path such as runs/my-run.zarr", ctx)
        return Path(values[0])

    return click.argument("store", nargs=-1, callback=one, metavar="STORE")(f)


def program_with_experts(spec: str, purpose: str) -> Program:
    """The program SPEC names, refused where it has no expert μGraphs to `purpose` (check, ask about)."""
    prog = resolve_program(spec)
    if not prog.experts:
        raise MugraphError(f"{spec}: the program has no expert μGraphs to {purpose}")
    return prog
