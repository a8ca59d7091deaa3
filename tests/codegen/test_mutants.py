"""A wrong μGraph fails the comparison: mutants of experts (a wrong imap, fmap, accumulator, omap or
operand order, as the verify tests make them) that float64 finds different also differ when their
emitted module runs in Triton's interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from mugraph.codegen import FP16_TOLERANCE
from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import from_json, to_json
from mugraph.programs import builtin_programs
from mugraph.programs.registry import Program
from mugraph.stages.verify.check import float_max_rel_err
from tests.helpers.emitting import NARROW_PROGRAMS, emit_and_check
from tests.helpers.mutants import mutants

PER_KIND = 1  # one wrong mutant of each kind per expert keeps the interpreter time short


def _wrong_mutants(expert: KernelGraph, reference: KernelGraph) -> list[tuple[str, KernelGraph, float]]:
    picked: list[tuple[str, KernelGraph, float]] = []
    seen: dict[str, int] = {}
    for kind, what, data in mutants(expert):
        if seen.get(kind, 0) >= PER_KIND:
            continue
        try:
            graph = from_json(data)
        except MugraphError:
            continue  # the IR refuses it: nothing to emit
        if [t.shape for t in graph.output_tensors] != [t.shape for t in reference.output_tensors]:
            continue  # another output shape: no element-wise comparison to make
        err = float_max_rel_err(reference, graph, [0], np)
        if err > 0.1:
            seen[kind] = seen.get(kind, 0) + 1
            picked.append((what, graph, err))
    return picked


def _program(which: str) -> Program:
    return NARROW_PROGRAMS[which] if which in NARROW_PROGRAMS else builtin_programs()[which]


@pytest.mark.parametrize("which", ["rms_norm", "gated_mlp", "gqa"])
def test_wrong_mugraphs_fail_the_comparison(which: str) -> None:
    """Most mutants change a shape and the IR refuses them; each of these experts has at least one
    (gqa: a swapped block matmul and a wrong accumulator) that runs and must differ. At the check's
    inputs in [-0.1, 0.1), exp(Q·K) is close to 1, so the swapped matmul moves gqa's output by only
    about 5 %: still ten times the tolerance."""
    prog = _program(which)
    reference = prog.reference()
    wrong = _wrong_mutants(prog.experts["expert"](), reference)
    assert wrong
    for what, graph, err in wrong:
        _, report = emit_and_check(graph, reference)
        assert not report.ok and report.max_rel_err > 5 * FP16_TOLERANCE, (what, err, report)


def test_swapped_kernel_inputs_fail_the_comparison() -> None:
    """silu(X·W2) * (X·W1) for silu(X·W1) * (X·W2): every shape fits, the values do not."""
    prog = _program("gated_mlp")
    data = to_json(prog.experts["expert"]())
    op = next(o for o in data["ops"] if o["kind"] == "customized")
    op["inputs"] = [op["inputs"][0], op["inputs"][2], op["inputs"][1]]
    _, report = emit_and_check(from_json(data), prog.reference())
    assert not report.ok and report.max_rel_err > 10 * FP16_TOLERANCE, report
