"""The command a store's meta records (`optimize ...` as it was typed), made into the command that
resumes the run: a recorded `--fresh` would delete what the store holds, and the store may have moved."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

__all__ = ["resuming_command"]


def resuming_command(command: Sequence[str], store: Path) -> str:
    """`mugraph` and the recorded `command` without `--fresh` and with `--store` set to `store`."""
    out: list[str] = []
    args = iter(command)
    for a in args:
        if a == "--store":
            next(args, None)
        elif not a.startswith("--store=") and a != "--fresh":
            out.append(a)
    return "mugraph " + shlex.join([*out, "--store", str(store)])
