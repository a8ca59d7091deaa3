"""Scale constants as the fingerprints see them, and what an UNDECIDED verdict says of them.

The ring takes a mul_scalar's constant as the exact rational its float is (`FieldSpec.from_fraction`).
A constant such as d^-1/4 is irrational, rounded to float64, and two of them multiplied are not the
float d^-1/2 exactly: an expert that scales Q and K by d^-1/4 each, where the program scales Q·K by
d^-1/2 once, differs from it in the ring while float64 agrees to a rounding. No ring element stands
for d^-1/4 consistently with the exact rationals the ops use (1/n of a mean: 2 has no square root
mod 227), so such an expert stays undecided, and the verdict names the constants and what to write.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from fractions import Fraction

from mugraph.ir.graph import KernelGraph, Op
from mugraph.ir.types import OpKind

EXACT_BITS = 16  # a constant whose odd significand is longer than this is taken as rounded (0.1, d^-1/4)


def _ops(graph: KernelGraph) -> Iterator[Op]:
    """Every op of the graph, those of its block graphs included."""
    for op in graph.ops:
        yield op
        if op.block is not None:
            yield from op.block.ops


def scale_constants(graph: KernelGraph) -> Counter[float]:
    """The graph's mul_scalar constants, each with how many ops scale by it."""
    return Counter(op.float_attr("scalar") for op in _ops(graph) if op.kind is OpKind.MUL_SCALAR)


def is_rounded(c: float) -> bool:
    """Whether `c` is likely a rounded value (a fractional power, a decimal fraction), not a short
    binary fraction (0.125, 1.5): its significand, without trailing zero bits, is long."""
    n = abs(Fraction(c).numerator)
    return n != 0 and (n >> ((n & -n).bit_length() - 1)).bit_length() > EXACT_BITS


def _listed(counts: Counter[float]) -> str:
    return ", ".join(f"{c:.8g}" + (f" x{k}" if k > 1 else "") for c, k in sorted(counts.items())) or "none"


def scale_hint(reference: KernelGraph, candidate: KernelGraph) -> str | None:
    """Why an undecided candidate may still be right, where its scale constants differ from the
    reference's and one of those that differ is rounded; None otherwise (two products of short binary
    fractions are exact in the ring, so those constants are not the cause)."""
    ref, cand = scale_constants(reference), scale_constants(candidate)
    only_cand, only_ref = cand - ref, ref - cand
    if not any(is_rounded(c) for c in (*only_cand, *only_ref)):
        return None
    return (
        f"the scale constants differ (the expert's {_listed(only_cand)}, the program's {_listed(only_ref)}): "
        "constants such as fractional powers are rounded to float64 and the fingerprints multiply the "
        "rounded values exactly, so a scale split across operands (d^-1/4 on Q and on K where the program "
        "has d^-1/2 once) may differ there by a rounding alone; write the scale once, as the program does"
    )
