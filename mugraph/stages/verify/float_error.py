"""How far a candidate's float64 outputs are from the reference's: each element's error relative to its
own size (`rel_err`), and the worst of several outputs' errors, NaN the worst of all."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

FLOAT_TOLERANCE = 1e-9  # relative to each element's size (`rel_err`)
SMALL_ELEMENTS = 1e-3  # elements below this fraction of an output's largest value are held to it (`rel_err`)


def rel_err(candidate: np.ndarray, reference: np.ndarray) -> float:
    """The largest error of an element relative to its own size: max |c - r| / (max(|c|, |r|) + floor),
    where floor = `SMALL_ELEMENTS` times the reference's largest finite |value|.

    Relative to each element, not to the output's largest value: a wrong region of small values (an
    activation replaced where its inputs are small, one head or row of another scale) is off by
    nearly all of its own size but by little of the output's largest value, where it would hide.
    The floor keeps an element that cancels to near zero from reading float64 rounding as an error:
    such an element is held to `FLOAT_TOLERANCE` times the floor, 1e-12 of the output's largest
    value, far above what reordering float64 sums costs there (3e-15 of it at most, on every expert
    and collected μGraph of the built-in programs; 7e-13 of an element's own size at most, larger
    elements included) and far below a wrong value. Elements that agree exactly count as equal, a
    NaN with a NaN and an infinity with itself among them (a reference's sqrt of a negative input is
    NaN, and so is a right candidate's); a NaN or an infinity on one side only makes the error NaN or
    infinite, never smaller."""
    with quiet_numerics():
        same = (candidate == reference) | (np.isnan(candidate) & np.isnan(reference))
        diff = np.where(same, 0.0, np.abs(candidate - reference))
        size = np.where(~same & np.isfinite(diff), np.maximum(np.abs(candidate), np.abs(reference)), 0.0)
        finite = np.abs(reference[np.isfinite(reference)])
        floor = max(SMALL_ELEMENTS * (float(finite.max()) if finite.size else 0.0), np.finfo(np.float64).tiny)
        return float((diff / (size + floor)).max()) if diff.size else 0.0


def quiet_numerics() -> np.errstate:
    """NumPy's floating-point warnings off: random inputs make NaNs and infinities in candidates (a sqrt
    of a negative, a division by zero) and in some references, which the comparison handles; as
    warnings they reached the terminal from every worker."""
    return np.errstate(all="ignore")


def _ordered(err: float) -> float:
    """An error as a sort key in which NaN (an output that is not a number) is the worst."""
    return math.inf if math.isnan(err) else err


def worst_output(errs: Sequence[float]) -> int:
    """The index of the largest error, a NaN's first (`_ordered`)."""
    return max(range(len(errs)), key=lambda i: _ordered(errs[i]))


def worst_error(errs: Sequence[float]) -> float:
    """The largest error, NaN where any is NaN (`max` would keep or drop a NaN by its position)."""
    return max(errs, key=_ordered, default=0.0)
