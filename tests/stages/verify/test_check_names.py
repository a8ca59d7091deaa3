"""Named outputs are compared by name: an expert that computes the reference's Q under the name K is
wrong, however its fingerprints line up under some permutation. The search's own candidates, whose
outputs are not named yet, are still matched under a permutation, which names them."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps
from mugraph.ir.types import OpKind
from mugraph.programs import load_program
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.verify.check import FloatReference, ReferenceFingerprints, check_equivalence
from mugraph.stages.verify.confirm import Confirmer
from mugraph.stages.verify.float_error import rel_err, worst_error
from mugraph.stages.verify.names import in_reference_order, name_order, names_of

QK = Path(__file__).parents[2] / "programs" / "files" / "qk_proj.py"
pytestmark = pytest.mark.unit


def _qk() -> tuple[KernelGraph, dict[str, KernelGraph]]:
    prog = load_program(QK)
    return prog.reference(), {label: build() for label, build in prog.experts.items()}


@pytest.mark.parametrize("label", ["right", "reordered", "inputs_reordered"])
def test_an_expert_right_by_name_is_equivalent(label: str) -> None:
    reference, experts = _qk()
    r = check_equivalence(reference, experts[label])
    assert r.equivalent and r.by_name, r.reason
    out = names_of(experts[label], OpKind.OUTPUT)
    assert [out[j] for j in r.permutation or ()] == ["Q", "K"]  # the reference's Q is compared with Q
    assert r.float_max_rel_err is not None and r.float_max_rel_err < 1e-12


def test_outputs_under_each_others_names_are_not_equivalent() -> None:
    reference, experts = _qk()
    r = check_equivalence(reference, experts["swapped"])
    assert not r.equivalent and r.permutation is None
    assert "'Q' (it computes the reference's 'K')" in r.reason and "'K' (it computes the reference's 'Q')" in r.reason
    # in marking order (the search's rule for unnamed outputs) the same graph passes: the fault `check` had
    assert ReferenceFingerprints(reference).match(experts["swapped"]) == (0, 1)
    unnamed = check_equivalence(reference, experts["swapped"], by_name=False)
    assert unnamed.equivalent and unnamed.permutation == (0, 1) and not unnamed.by_name
    reordered = check_equivalence(reference, experts["reordered"], by_name=False)
    assert reordered.equivalent and reordered.permutation == (1, 0)  # the permutation used is reported


def test_the_confirm_stage_compares_by_name() -> None:
    reference, experts = _qk()
    c = Confirmer(reference, "qk")
    assert c.confirm(experts["reordered"])["equivalent"]
    bad = c.confirm(experts["swapped"])
    assert not bad["equivalent"] and bad["reason"].startswith("fingerprints differ on outputs 'Q'")


def test_names_that_differ_are_named() -> None:
    reference, _ = _qk()
    g = KernelGraph()
    x = g.new_input((16, 256), name="X")
    wq, wk = g.new_input((256, 64), name="Wq"), g.new_input((256, 64), name="Wk")
    h = g.rms_norm(x)
    g.mark_output(g.matmul(h, wq), "Q")
    g.mark_output(g.matmul(h, wk), "out1")
    why = name_order(reference, g)
    assert why == "output names differ: the reference's are 'Q', 'K', the candidate's 'Q', 'out1'"
    assert check_equivalence(reference, g).reason == why
    g = KernelGraph()
    g.new_input((16, 256), name="X")
    assert "input names differ" in str(name_order(reference, g))


def test_one_wrong_output_is_named_with_its_float_error() -> None:
    """Equal fingerprints, outputs apart in float64 (a scale of 1 + pq/2**20, which is 1 in the ring
    Z_pq): the float check names the output that is off."""
    ref, cand = KernelGraph(), KernelGraph()
    for g, c in ((ref, 1.0), (cand, 1 + 227 * 113 / 2**20)):
        x = g.new_input((8, 8), name="X")
        g.mark_output(g.exp(x), "A")
        g.mark_output(g.mul_scalar(x, c), "B")
    r = check_equivalence(ref, cand)
    assert not r.equivalent and "on output 'B'" in r.reason, r.reason


def test_nan_is_the_worst_error() -> None:
    assert np.isnan(worst_error([0.0, float("nan"), 1.0])) and np.isnan(worst_error([float("nan"), 1.0]))
    assert worst_error([0.5, 2.0]) == 2.0 and worst_error([]) == 0.0
    reference, experts = _qk()
    errs = FloatReference(reference, np).rel_errs(experts["swapped"], (1, 0))  # Q with its Q
    assert min(errs) > 0.1  # by name, each output is far off


def test_the_search_names_outputs_that_come_out_in_another_order() -> None:
    """K = X·Wk is the reference's first output, but the search makes X·Wq first: its candidate's
    outputs come out as (X·Wq, X·Wk), are matched under the permutation (1, 0), and the μGraph it
    records names each after the reference output it equals."""
    g = KernelGraph()
    x = g.new_input((16, 64), name="X")
    wq, wk = g.new_input((64, 32), name="Wq"), g.new_input((64, 32), name="Wk")
    g.mark_output(g.matmul(x, wk), "K")
    g.mark_output(g.matmul(x, wq), "Q")
    cfg = preset_config("mlp").with_overrides({"kernel_ops": ["matmul"], "max_block_graphs": 0})
    found = Searcher(Fragment(g, cfg, "kq")).explore(()).found
    assert len(found) == 1
    (f,) = found.values()
    kg = f.kernel_graph()
    assert names_of(kg, OpKind.OUTPUT) == ["K", "Q"]
    k, q = kg.output_tensors
    assert k.index > q.index  # X·Wk was made after X·Wq: the outputs came out in the other order
    r = check_equivalence(g, kg)
    assert r.equivalent and r.permutation == (0, 1), r.reason


def test_nans_where_the_reference_has_them_are_equal_and_quiet() -> None:
    """sqrt of inputs uniform in [-1, 1): NaN in half the reference's elements. The reference equals
    itself without a NumPy warning (each used to reach the terminal from every worker)."""
    g = KernelGraph()
    g.mark_output(g.sqrt(g.new_input((8, 8), name="X")), "O")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = check_equivalence(g, g)
        confirmed = Confirmer(g, "sqrt").confirm(g)  # what every worker runs on each μGraph found
    assert r.equivalent and r.float_max_rel_err == 0.0, r.reason
    assert confirmed["equivalent"] and confirmed["float_max_rel_err"] == 0.0, confirmed
    ref = np.array([np.nan, 2.0, np.inf])
    assert rel_err(ref.copy(), ref) == 0.0
    assert np.isnan(rel_err(np.array([1.0, 2.0, np.inf]), ref))  # a NaN on one side only
    assert rel_err(np.array([np.nan, 2.0, 1.0]), ref) == np.inf
    assert rel_err(np.array([np.nan, 3.0, np.inf]), ref) == pytest.approx(1 / (3.0 + 2e-3))  # of the element's size


def _norms(scale_outside: bool, factor: float) -> KernelGraph:
    """sqrt(Σx²/64) over rows of a [16, 64] input, or sqrt(Σx²)·`factor` (1/8 computes the same)."""
    g = KernelGraph()
    x = g.new_input((16, 64), name="X")
    s = g.reduction(g.square(x), 1)
    g.mark_output(g.mul_scalar(g.sqrt(s), factor) if scale_outside else g.sqrt(g.mul_scalar(s, factor)), "O")
    return g


def test_an_identity_through_sqrt_is_undecided_not_refuted() -> None:
    """Fingerprints take sqrt as a table over Z_q, where sqrt(a·b) = sqrt(a)·sqrt(b) does not hold:
    the expert differs there, float64 agrees, and the verdict says both without accepting it."""
    reference = _norms(False, 1 / 64)
    same = check_equivalence(reference, _norms(True, 1 / 8))
    assert not same.equivalent and same.undecided
    assert same.float_max_rel_err is not None and same.float_max_rel_err < 1e-12
    assert "fingerprints differ on output 'O'; yet float64 agrees" in same.reason
    wrong = check_equivalence(reference, _norms(True, 1 / 7))
    assert not wrong.equivalent and not wrong.undecided and "float64 agrees" not in wrong.reason
    assert wrong.float_max_rel_err is not None and wrong.float_max_rel_err > 0.1


def test_exp_of_a_sum_is_a_product_in_the_fingerprints_too() -> None:
    """exp is ω^x there, a homomorphism: that identity is seen (what the UNDECIDED message leaves out)."""

    def graph(product: bool) -> KernelGraph:
        g = KernelGraph()
        a, b = g.new_input((16, 64), name="A"), g.new_input((16, 64), name="B")
        g.mark_output(g.mul(g.exp(a), g.exp(b)) if product else g.exp(g.add(a, b)), "O")
        return g

    r = check_equivalence(graph(False), graph(True))
    assert r.equivalent and not r.undecided


def _two_outputs(marks_b_first: bool, inputs_late: bool) -> KernelGraph:
    """exp(X@W) as 'A' and X@W as 'B'; marked B first (A's tensor made after the mark), or W
    declared and used before X."""
    g = KernelGraph()
    if inputs_late:
        w = g.new_input((64, 48), name="W")
        ew = g.exp(w)
        x = g.new_input((16, 64), name="X")
        m = g.matmul(x, ew)
    else:
        x, w = g.new_input((16, 64), name="X"), g.new_input((64, 48), name="W")
        m = g.matmul(x, g.exp(w))
    if marks_b_first:
        g.mark_output(m, "B")
        g.mark_output(g.exp(m), "A")
    else:
        g.mark_output(g.exp(m), "A")
        g.mark_output(m, "B")
    return g


@pytest.mark.parametrize(("marks_b_first", "inputs_late"), [(True, False), (False, True), (True, True)])
def test_in_reference_order_moves_marks_and_inputs_wherever_they_are(marks_b_first: bool, inputs_late: bool) -> None:
    reference = _two_outputs(marks_b_first=False, inputs_late=False)
    expert = _two_outputs(marks_b_first, inputs_late)
    assert check_equivalence(reference, expert).equivalent
    ordered = in_reference_order(expert, reference)
    # the reference's own graph, op for op: what the search records for it
    assert dumps(ordered) == dumps(reference)


def test_in_reference_order_leaves_out_ops_no_output_reads() -> None:
    """An expert with an op nothing reads (an exp left over, W declared after an unused relu) was found
    by `optimize` (the canonical digest does not see the op) and said outside the space by `explain`."""
    reference = _two_outputs(marks_b_first=False, inputs_late=False)
    g = KernelGraph()
    g.relu(g.new_input((16, 64), name="X"))  # read by nothing
    x, w = g.tensor(0), g.new_input((64, 48), name="W")
    m = g.matmul(x, g.exp(w))
    g.exp(m)  # read by nothing either
    g.mark_output(g.exp(m), "A")
    g.mark_output(m, "B")
    assert check_equivalence(reference, g).equivalent
    assert dumps(in_reference_order(g, reference)) == dumps(reference)
