"""A path's choices as the structure tree labels them, from the instantiated tree's labels."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["structure_labels"]

_OPEN = re.compile(r"^open\((.*)imaps=(\[.*\])\)$")
_LOOP = re.compile(r"^loop\(fmaps=(\[.*\]),F=(\d+)\)$")
_CLOSE = re.compile(r"^close\(omap=(\[.*\])\)$")


def structure_labels(labels: Sequence[str]) -> list[str]:
    """A path's choices in the instantiated tree (`expand.describe_instances`) as this tree labels
    them: the grid stays with the opening, and the imaps, fmaps and for-loop range move to the
    closing."""
    out: list[str] = []
    maps = ""
    for label in labels:
        if (m := _OPEN.match(label)) is not None:
            out.append(f"open({m.group(1).rstrip(',')})")
            maps = f"imaps={m.group(2)},"
        elif (m := _LOOP.match(label)) is not None:
            maps += f"fmaps={m.group(1)},F={m.group(2)},"
        elif (m := _CLOSE.match(label)) is not None:
            out.append(f"close({maps}omap={m.group(1)})")
        else:
            out.append(label)
    return out
