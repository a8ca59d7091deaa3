"""Every expert μGraph equals its reference program, under fingerprints and in float64."""

from __future__ import annotations

import numpy as np
import pytest

from mugraph.stages.verify.check import check_equivalence, float_inputs
from mugraph.stages.verify.field import FieldSpec
from tests.helpers.builtin import EXPERTS, PROGRAMS, reference, reference_fingerprints

SEED_SETS = [(0, 1, 2), (11, 12, 13)]


@pytest.mark.parametrize(("name", "label"), EXPERTS)
def test_expert_matches_reference_on_three_seeds(name: str, label: str) -> None:
    expert = PROGRAMS[name].experts[label]()
    order, reason = reference_fingerprints(name).match_named(expert)  # experts name their outputs
    assert order is not None and order.outputs == tuple(range(len(order.outputs))), reason
    other = check_equivalence(reference(name), expert, seeds=SEED_SETS[1])
    assert other.equivalent, other.reason
    assert other.float_max_rel_err is not None and other.float_max_rel_err < 1e-6


def test_experts_cover_every_benchmark() -> None:
    benchmarks = {"rms_norm", "lora", "gated_mlp", "gqa", "qknorm_gqa", "ntrans"}
    assert set(PROGRAMS) == benchmarks | {"transformer_block"}
    assert all(PROGRAMS[n].experts for n in benchmarks)


def test_fingerprints_distinguish_seeds() -> None:
    fp = reference_fingerprints("lora")
    outs = [o[0] for o in fp.outputs]
    assert not np.array_equal(outs[0], outs[1])
    assert len({c.omega for c in fp.cases}) >= 2


def test_mirages_primes_also_accept_the_experts() -> None:
    for name, label in (("lora", "saved"), ("gqa", "expert")):
        r = check_equivalence(reference(name), PROGRAMS[name].experts[label](), spec=FieldSpec(167, 83))
        assert r.equivalent, (name, r.reason)


def test_float_interpreter_matches_numpy_on_references() -> None:
    """The float64 semantics of the reference programs, written out directly in NumPy."""
    lora = reference("lora")
    x, w, a, b = float_inputs(lora, 0, np)
    from mugraph.stages.verify.algebra import Float64Algebra
    from mugraph.stages.verify.interpret import evaluate

    (o,) = evaluate(Float64Algebra(np), lora, [x, w, a, b])
    np.testing.assert_allclose(o, x @ w + (x @ a) @ b, rtol=1e-12)

    gqa = reference("gqa")
    q, k, v = float_inputs(gqa, 1, np)
    (o,) = evaluate(Float64Algebra(np), gqa, [q, k, v])
    e = np.exp(q @ k)
    np.testing.assert_allclose(o, (e / e.sum(axis=2, keepdims=True)) @ v, rtol=1e-12)

    rms = reference("rms_norm")
    x, w = float_inputs(rms, 2, np)
    (o,) = evaluate(Float64Algebra(np), rms, [x, w])
    np.testing.assert_allclose(o, (x / np.sqrt((x * x).mean(axis=1, keepdims=True))) @ w, rtol=1e-12)
