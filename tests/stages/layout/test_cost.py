"""The placeholder ranking: fused experts beat their unfused references, deterministically."""

from __future__ import annotations

import pytest

from mugraph.stages.layout.cost import LAUNCH_SECONDS, rank, simple_cost
from tests.conftest import EXPERTS, PROGRAMS, reference


@pytest.mark.parametrize(("name", "label"), EXPERTS)
def test_every_expert_ranks_above_its_reference(name: str, label: str) -> None:
    ref, expert = reference(name), PROGRAMS[name].experts[label]()
    ranking = rank({"ref": ref, "expert": expert}, ref)
    assert ranking[0]["digest"] == "expert", ranking
    assert ranking[0]["speedup"] > 1.0 and ranking[1]["speedup"] == 1.0
    assert simple_cost(expert).kernels < simple_cost(ref).kernels


def test_cost_terms_add_up_and_ties_break_by_digest() -> None:
    ref = reference("lora")
    c = simple_cost(ref)
    assert c.kernels == 4  # three matmuls and an add
    assert c.estimated_seconds == pytest.approx(4 * LAUNCH_SECONDS + c.dram_bytes / 2.0e12)
    tied = rank({"b": ref, "a": reference("lora")}, ref)
    assert [r["digest"] for r in tied] == ["a", "b"]
