"""The command a store's meta records (`optimize ...` as it was typed), made into the command that
resumes the run: a recorded `--fresh` would delete what the store holds, and the store may have moved.
A store made from Python records `optimize <torch model NAME>`, which no shell can run again."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "KEYWORDS_ARG",
    "OUTPUT_FLAGS",
    "TORCH_MODEL_ARG",
    "for_a_person",
    "is_model_command",
    "made_from_python",
    "program_argument",
    "python_call",
    "resuming_command",
]

TORCH_MODEL_ARG = "<torch model"  # how `mugraph.optimize` records its model in the command: `<torch model NAME>`
KEYWORDS_ARG = "<example_kwargs>"  # and, after it, that the model was called with keyword arguments


def resuming_command(meta: Mapping[str, Any], store: Path) -> str | None:
    """`mugraph` and the recorded command without `--fresh`, without `--json` (`for_a_person`) and with
    `--store` set to `store`; None
    where the meta records no command line to run again (none, or a model passed from Python)."""
    command = meta.get("command")
    if not (isinstance(command, list) and command[:1] == ["optimize"] and all(isinstance(a, str) for a in command)):
        return None
    if is_model_command(command):
        return None
    out: list[str] = []
    args = iter(for_a_person(command))
    for a in args:
        if a == "--store":
            next(args, None)
        elif not a.startswith("--store=") and a != "--fresh":
            out.append(a)
    if len(out) > 1:
        out[1] = program_argument(meta, out[1])
    return "mugraph " + shlex.join([*out, "--store", str(store)])


# `optimize`'s flags that change only how the run prints, never what it computes, stores or writes
OUTPUT_FLAGS = frozenset({"--json"})
# its flags that take no value: a word after any other option is that option's value, even "--json"
_BARE_FLAGS = frozenset({"--fresh", "--emit", *OUTPUT_FLAGS})


def for_a_person(words: list[str]) -> list[str]:
    """A recorded command's words without the flags that only change how its output is printed
    (`--json`, one JSON event per line, which a reader told "run this to resume" does not want); every
    flag that changes what the run computes or writes is kept, and so is a word that is another
    option's value or comes after `--`."""
    kept: list[str] = []
    for i, word in enumerate(words):
        if word == "--":
            return kept + words[i:]
        after = words[i - 1] if i else ""
        is_value = after.startswith("--") and "=" not in after and after not in _BARE_FLAGS
        if word not in OUTPUT_FLAGS or is_value:
            kept.append(word)
    return kept


def program_argument(meta: Mapping[str, Any], program: str) -> str:
    """The PROGRAM of a recorded command as it is typed here: a file named relative to the directory
    the run was started from is named from there, unless that is this directory."""
    cwd = meta.get("cwd")
    if not isinstance(cwd, str) or Path(program).suffix not in (".py", ".json") or Path(program).is_absolute():
        return program
    return program if Path(cwd) == Path.cwd() else str(Path(cwd) / program)


def is_model_command(command: object) -> bool:
    """Whether `command` is what `mugraph.optimize` records for a model (`optimize <torch model NAME>`)."""
    return isinstance(command, list | tuple) and any(
        isinstance(a, str) and a.startswith(TORCH_MODEL_ARG) for a in command
    )


def made_from_python(meta: Mapping[str, Any]) -> bool:
    """Whether `mugraph.optimize` made the store from a model: its run resumes from Python only."""
    return is_model_command(meta.get("command"))


def python_call(store: Path, meta: Mapping[str, Any] | None = None) -> str:
    """The call that resumes a store `mugraph.optimize` made: the same model and inputs (and keyword
    inputs, where its `meta` records the model was called with some), this store."""
    command = (meta or {}).get("command")
    keywords = isinstance(command, list | tuple) and KEYWORDS_ARG in command
    kwargs = "example_kwargs=example_kwargs, " if keywords else ""
    return f"mugraph.optimize(model, example_inputs, {kwargs}store={str(store)!r})"
