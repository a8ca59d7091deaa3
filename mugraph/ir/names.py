"""Which names a graph and a program may carry, and how a name is shown in a message.

Names are data: they reach generated Python (emitted modules), terminals, file names and HTML. A
name is therefore held to a small set of characters at the moment it enters a graph or a program,
so that no control character (NUL, newline), bidirectional override (U+202E), quote or backslash can
end a comment or string of emitted code, reorder a terminal line, or hide in a file name. Messages
about a refused name show it through `ascii`, never raw.
"""

from __future__ import annotations

import re

from mugraph.ir.errors import GraphStructureError

NAME_MAX = 128
# Tensor names: identifier-like, plus the punctuation of realistic names (`x.weight`, `layer0/q`,
# `attn-out`, `h[0]`, and the `f0:o1` names fragments give their boundary tensors).
TENSOR_CHARS = "A-Z a-z 0-9 _ . : / + - [ ]"
_TENSOR = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/+\-\[\]]*")
# Program names and expert labels: from a file's name too, so a space is allowed (not at an end).
LABEL_CHARS = "A-Z a-z 0-9 _ . + - and inner spaces"
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.+\- ]*[A-Za-z0-9_.+\-])?")


class BadNameError(GraphStructureError):
    """A name holds a character names may not hold, is empty, or is too long."""


def shown(name: object, limit: int = 80) -> str:
    """A name as a message shows it: quoted, every non-ASCII or control character escaped, cut at `limit`."""
    text = ascii(name)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def printable(text: str) -> str:
    """Free text (a path, an exception's message) for a one-line message: every character that is
    not printable (control characters, newlines, bidirectional and zero-width marks) escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _check(name: object, what: str, pattern: re.Pattern[str], chars: str) -> str:
    if not isinstance(name, str):
        raise BadNameError(f"{what} name {shown(name)} is not a string")
    if not name:
        raise BadNameError(f"{what} name is empty")
    if len(name) > NAME_MAX:
        raise BadNameError(f"{what} name {shown(name)} is {len(name)} characters long; at most {NAME_MAX}")
    if pattern.fullmatch(name) is None:
        raise BadNameError(
            f"{what} name {shown(name)} is not allowed: a name is made of {chars}, "
            "and starts with a letter, a digit or _"
        )
    return name


def check_tensor_name(name: object, what: str) -> str:
    """`name` if it may name a graph's input or output (`what` says which, for the message)."""
    return _check(name, what, _TENSOR, TENSOR_CHARS)


def check_label(name: object, what: str) -> str:
    """`name` if it may name a program or an expert (`what` says which, for the message)."""
    return _check(name, what, _LABEL, LABEL_CHARS)
