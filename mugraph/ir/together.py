"""A program's fragments priced together: the sum of their references' estimated times against the sum
of what runs in their place (the chosen μGraph, or the reference where it is kept). Each fragment's
speedup is over that fragment alone; two fragments at 2.77x each are not a program at 2.77x when
others keep their reference. The ops outside every fragment (glue a PyTorch model leaves to PyTorch,
non-LAX ops copied between fragments) are in neither sum, and the line says so. Every room that
gives the figure (the console, `show`, the report, the torch module's verdict) takes it from here."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# what the figure leaves out, where the reader knows no more of it
OUTSIDE = "ops outside the fragments"


@dataclass(frozen=True)
class Together:
    """The estimated seconds of a program's fragments, summed: their references, and what runs."""

    reference_seconds: float
    chosen_seconds: float
    fragments: int

    @property
    def speedup(self) -> float:
        """The references' time over the chosen time (inf where nothing runs in their place)."""
        return self.reference_seconds / self.chosen_seconds if self.chosen_seconds > 0 else math.inf

    def ratio(self) -> str:
        """The speedup as the console gives one: "1.44x" (three decimals where two would say 1.00x)."""
        return "∞x" if math.isinf(self.speedup) else speedup_text(self.speedup)

    def line(self, outside: str = OUTSIDE) -> str:
        """ "fragments together: 18.0 μs → 12.5 μs, estimated 1.44x; not priced: glue run by PyTorch
        (softmax)"; `outside` names what no fragment holds ("" where nothing is: the whole program)."""
        figure = f"{_micro(self.reference_seconds)} → {_micro(self.chosen_seconds)}, estimated {self.ratio()}"
        if not outside:
            return f"fragments together (the whole program): {figure}"
        return f"fragments together: {figure}; not priced: {outside}"


def together(seconds: Iterable[tuple[float, float]]) -> Together | None:
    """The fragments' (reference, chosen) seconds summed; None for fewer than two fragments, whose
    one figure the fragment's own line gives."""
    pairs = list(seconds)
    if len(pairs) < 2:
        return None
    return Together(sum(r for r, _ in pairs), sum(c for _, c in pairs), len(pairs))


def summed(rows: Mapping[str, Sequence[Mapping[str, Any]]], chosen: Mapping[str, str]) -> Together | None:
    """The fragments together from each fragment's ranking rows (the reference's among them) and the
    digest the run chose; None for one fragment, or where a fragment's pair cannot be read."""
    seconds = []
    for name, fragment_rows in rows.items():
        pair = fragment_seconds(fragment_rows, chosen.get(name, ""))
        if pair is None:
            return None
        seconds.append(pair)
    return together(seconds)


def fragment_seconds(rows: Sequence[Mapping[str, Any]], chosen: str) -> tuple[float, float] | None:
    """One fragment's (reference, chosen) estimated seconds from its ranking rows (the reference's
    among them) and the digest the run chose; a kept reference counts its own time on both sides.
    None where the rows lack the reference or the chosen digest (a run with nothing ranked yet)."""
    reference = next((r for r in rows if r.get("reference")), None)
    if reference is None:
        return None
    ref_s = float(reference["estimated_seconds"])
    if chosen == reference["digest"]:
        return ref_s, ref_s
    row = next((r for r in rows if r["digest"] == chosen and not r.get("reference")), None)
    return None if row is None else (ref_s, float(row["estimated_seconds"]))


def outside_words(torch_glue: Sequence[str] | None, between: Sequence[str], from_torch: bool) -> str:
    """What no fragment holds, for `Together.line`: the glue a PyTorch model leaves to PyTorch (its op
    names, `torch_glue`, or None where the reader does not know them), and the ops copied as written
    between fragments (`between`: relu, clamp). "" where nothing is outside them."""
    parts = []
    if from_torch and torch_glue is None:
        parts.append("any glue run by PyTorch")
    elif from_torch and torch_glue:
        parts.append(f"glue run by PyTorch ({op_list(torch_glue)})")
    if between:
        parts.append(f"ops between fragments ({op_list(between)})")
    return " and ".join(parts)


def op_list(ops: Sequence[str], most: int = 8) -> str:
    """Op names once each, in order, with a count where one repeats: "permute ×2, softmax"."""
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    words = [f"{op} ×{n}" if n > 1 else op for op, n in counts.items()]
    more = f", and {len(words) - most} more" if len(words) > most else ""
    return ", ".join(words[:most]) + more


def speedup_text(x: float) -> str:
    """A speedup as a reader compares it with 1: two decimals, three where two would round it to
    1.00x (a candidate 0.4% faster is not "1.00x, within the model's error"). A μGraph of no kernel
    (its outputs are its inputs) is estimated at 0 s, and its row's speedup is stored as 0: "∞x"."""
    if x <= 0:
        return "∞x"
    return f"{x:.3f}x" if x != 1.0 and round(x, 2) == 1.0 else f"{x:.2f}x"


def _micro(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} μs"
