"""The command a store's meta records (`optimize ...` as it was typed), made into the command that
resumes the run: a recorded `--fresh` would delete what the store holds, and the store may have moved.
A store made from Python records `optimize <torch model NAME>`, which no shell can run again."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["TORCH_MODEL_ARG", "made_from_python", "python_call", "resuming_command"]

TORCH_MODEL_ARG = "<torch model"  # how `mugraph.optimize` records its model in the command: `<torch model NAME>`


def resuming_command(meta: Mapping[str, Any], store: Path) -> str | None:
    """`mugraph` and the recorded command without `--fresh` and with `--store` set to `store`; None
    where the meta records no command line to run again (none, or a model passed from Python)."""
    command = meta.get("command")
    if not (isinstance(command, list) and command[:1] == ["optimize"] and all(isinstance(a, str) for a in command)):
        return None
    if any(a.startswith(TORCH_MODEL_ARG) for a in command):
        return None
    out: list[str] = []
    args = iter(command)
    for a in args:
        if a == "--store":
            next(args, None)
        elif not a.startswith("--store=") and a != "--fresh":
            out.append(a)
    return "mugraph " + shlex.join([*out, "--store", str(store)])


def made_from_python(meta: Mapping[str, Any]) -> bool:
    """Whether `mugraph.optimize` made the store from a model: its run resumes from Python only."""
    command = meta.get("command")
    return isinstance(command, list) and any(isinstance(a, str) and a.startswith(TORCH_MODEL_ARG) for a in command)


def python_call(store: Path) -> str:
    """The call that resumes a store `mugraph.optimize` made: the same model and inputs, this store."""
    return f"mugraph.optimize(model, example_inputs, store={str(store)!r})"
