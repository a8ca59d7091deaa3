"""The fragments priced together from ranking rows as a store holds them: a kept reference counts its
own time on both sides, a chosen μGraph its estimate; one fragment gives no figure; the ops the stitched
program copies between fragments (relu) are named as not priced, and nothing is where there are none."""

from __future__ import annotations

from typing import Any

from mugraph.dashboards.summary import stored_together
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps
from mugraph.ir.together import fragment_seconds, op_list, together


def _rows(reference: float, found: float) -> list[dict[str, Any]]:
    return [
        {"digest": "b" * 64, "estimated_seconds": found},
        {"digest": "r" * 64, "estimated_seconds": reference, "reference": True},
    ]


def _program(relu: bool) -> str:
    g = KernelGraph()
    x = g.new_input((16, 64), "float16", "x")
    w = g.new_input((64, 64), "float16", "w")
    y = g.matmul(x, w)
    g.mark_output(g.relu(y) if relu else y, "y")
    return dumps(g)


def test_a_kept_reference_counts_on_both_sides() -> None:
    rows = {"f0": _rows(9e-6, 3e-6), "f1": _rows(4e-6, 5e-6)}
    final = {"best_per_fragment": {"f0": "b" * 64, "f1": "r" * 64}, "program_graph": _program(relu=False)}
    line = stored_together(final, rows, from_torch=False)
    ref, chosen = 9e-6 + 4e-6, 3e-6 + 4e-6
    assert line == (
        f"fragments together (the whole program): {ref * 1e6:,.1f} μs → {chosen * 1e6:,.1f} μs, "
        f"estimated {ref / chosen:.2f}x"
    )
    assert fragment_seconds(rows["f1"], "b" * 64) == (4e-6, 5e-6)  # a slower μGraph chosen counts as slower


def test_what_no_fragment_holds_is_named() -> None:
    rows = {"f0": _rows(9e-6, 3e-6), "f1": _rows(4e-6, 2e-6)}
    final = {"best_per_fragment": {"f0": "b" * 64, "f1": "b" * 64}, "program_graph": _program(relu=True)}
    line = stored_together(final, rows, from_torch=True)
    assert line is not None and line.endswith("; not priced: any glue run by PyTorch and ops between fragments (relu)")


def test_one_fragment_or_no_result_gives_none() -> None:
    final = {"best_per_fragment": {"f0": "b" * 64}, "program_graph": _program(relu=False)}
    assert stored_together(final, {"f0": _rows(9e-6, 3e-6)}, from_torch=True) is None
    assert stored_together(None, {"f0": _rows(1e-6, 1e-6), "f1": _rows(1e-6, 1e-6)}, from_torch=True) is None
    assert together([(1e-6, 1e-6)]) is None


def test_glue_ops_are_listed_once_with_their_count() -> None:
    ops = ["view", "transpose", "view", "softmax", "view"]
    assert op_list(ops) == f"view ×{ops.count('view')}, transpose, softmax"
    assert op_list([f"op{i}" for i in range(10)], most=8).endswith(", and 2 more")
