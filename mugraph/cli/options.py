"""Options more than one command takes, written once so their names, defaults and help agree."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


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
        help="Shared verdict memo: redis://HOST:PORT/DB, unix:///PATH, or 'local' (no server). "
        "Default: a private redis-server keeping its data in --memo-dir.",
    )(f)


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
