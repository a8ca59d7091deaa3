"""A recorded command as a person is told to run it: without the flags that only change how its output
is printed (`--json`, one JSON event per line), which a reader of "run this to resume" does not want,
and with every flag that changes what the run computes or writes kept as it was typed."""

from __future__ import annotations

import shlex

__all__ = ["OUTPUT_FLAGS", "for_a_person"]

# `optimize`'s flags that change only how the run prints, never what it computes, stores or writes
OUTPUT_FLAGS = frozenset({"--json"})
# its flags that take no value: a word after any other option is that option's value, even "--json"
_BARE_FLAGS = frozenset({"--fresh", "--emit", *OUTPUT_FLAGS})


def for_a_person(command: str) -> str:
    """`command` (a shell line, as `shlex.join` writes it) without its output-format flags (before a
    `--`; never a word that is another option's value)."""
    words = shlex.split(command)
    kept: list[str] = []
    for i, word in enumerate(words):
        if word == "--":
            kept += words[i:]
            break
        after = words[i - 1] if i else ""
        is_value = after.startswith("--") and "=" not in after and after not in _BARE_FLAGS
        if word in OUTPUT_FLAGS and not is_value:
            continue
        kept.append(word)
    return shlex.join(kept)
