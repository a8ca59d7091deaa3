"""What the fingerprints and the float64 check each must see on their own.

The fingerprints: an activation written as another expression of exp (gelu(x) as silu(x)·exp(x)),
whose values float64 cannot see where they are far smaller than the rest of the output. The float64
check: a region of small values that is wrong by an amount the ring cannot see (a scale of
1 + pq/2**35 is 1 in Z_pq), compared with each element's own size, not the output's largest value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mugraph.ir.graph import KernelGraph
from mugraph.programs import load_program
from mugraph.stages.verify.check import ReferenceFingerprints, check_equivalence
from mugraph.stages.verify.float_error import FLOAT_TOLERANCE, rel_err

FILES = Path(__file__).parents[2] / "programs" / "files"
PQ = 227 * 113
pytestmark = pytest.mark.unit


def test_gelu_written_as_silu_times_exp_is_not_accepted() -> None:
    """The expert equals the program but for gelu(Y) -> silu(Y)·exp(Y), in a branch 2^-40 of the
    output's size: float64 agrees within its tolerance, the fingerprints do not."""
    prog = load_program(FILES / "gelu_branch.py")
    reference = prog.reference()
    wrong = check_equivalence(reference, prog.experts["silu_exp"]())
    assert not wrong.equivalent and wrong.reason.startswith("fingerprints differ on output 'O'"), wrong.reason
    assert check_equivalence(reference, prog.experts["right"]()).equivalent


def _activations(*chain: str) -> KernelGraph:
    g = KernelGraph()
    t = g.matmul(g.new_input((16, 64), name="X"), g.new_input((64, 32), name="W"))
    for name in chain:
        t = g.mul(g.silu(t), g.exp(t)) if name == "silu*exp" else getattr(g, name)(t)
    g.mark_output(t, "O")
    return g


@pytest.mark.parametrize(
    ("reference", "candidate"),
    [
        (("gelu",), ("silu*exp",)),
        (("gelu",), ("gelu_erf",)),
        (("silu",), ("gelu",)),
        (("gelu", "silu"), ("silu", "gelu")),  # composition order kept
        (("silu", "exp"), ("exp", "silu")),
        (("relu", "gelu"), ("gelu", "relu")),
    ],
)
def test_fingerprints_tell_activations_and_their_order_apart(
    reference: tuple[str, ...], candidate: tuple[str, ...]
) -> None:
    order, why = ReferenceFingerprints(_activations(*reference)).match_named(_activations(*candidate))
    assert order is None and why.startswith("fingerprints differ"), why
    same, _ = ReferenceFingerprints(_activations(*reference)).match_named(_activations(*reference))
    assert same is not None


def _halves(small_scale: float) -> KernelGraph:
    """concat(X·W, 2^-12·(Y·V)): the second half about 2^-12 of the first's size."""
    g = KernelGraph()
    x, w = g.new_input((16, 256), name="X"), g.new_input((256, 64), name="W")
    y, v = g.new_input((16, 256), name="Y"), g.new_input((256, 64), name="V")
    g.mark_output(g.concat(g.matmul(x, w), g.mul_scalar(g.matmul(y, v), small_scale), 1), "O")
    return g


def test_a_wrong_region_of_small_values_is_refused_by_float64() -> None:
    """The small half off by 7.5e-7 of its own size, which the ring cannot see: against the output's
    largest value that was 2e-10, under the tolerance; against its own size it is far over."""
    scale = 2.0**-12
    wrong = check_equivalence(_halves(scale), _halves(scale * (1 + PQ / 2**35)))
    assert not wrong.equivalent and "float64 relative error" in wrong.reason, wrong.reason
    assert wrong.float_max_rel_err is not None and wrong.float_max_rel_err > 100 * FLOAT_TOLERANCE
    right = check_equivalence(_halves(scale), _halves(scale))
    assert right.equivalent and right.float_max_rel_err == 0.0


def test_each_element_is_compared_with_its_own_size() -> None:
    rng = np.random.default_rng(0)
    ref = np.concatenate([rng.uniform(-10, 10, 1000), rng.uniform(-1e-2, 1e-2, 1000)])
    wrong = ref.copy()
    wrong[1000:] *= 1 + 5e-7  # the small region, off by 5e-7 of its size
    assert rel_err(wrong, ref) > 100 * FLOAT_TOLERANCE
    assert np.abs(wrong - ref).max() / np.abs(ref).max() < FLOAT_TOLERANCE  # what the output's largest value hid
    rounded = ref * (1 + rng.uniform(-4e-16, 4e-16, ref.size))  # float64 rounding on every element
    rounded[:10] = rng.uniform(-3e-14, 3e-14, 10)  # elements that cancel to about zero (3e-15 of the largest)
    ref[:10] = 0.0
    assert rel_err(rounded, ref) < FLOAT_TOLERANCE / 100
