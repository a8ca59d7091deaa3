"""A chosen μGraph's line in the verdict never calls a slowdown faster: a μGraph the model estimated
slower than the reference is chosen where a GPU timed it faster, and its line says slower."""

from __future__ import annotations

import pytest

from mugraph.torch.verdict import FragmentVerdict


@pytest.mark.parametrize(
    ("speedup", "words"),
    [
        (2.0, "estimated 2.00x faster"),
        (1.004, "estimated 1.004x faster"),
        (1.0, "estimated as fast as the reference"),
        (0.94, "estimated slower than the reference (0.94x its speed)"),
        (0.996, "estimated slower than the reference (0.996x its speed)"),
    ],
)
def test_a_chosen_mugraph_s_estimate_reads_as_what_it_is(speedup: float, words: str) -> None:
    line = FragmentVerdict("f0", "a" * 64, speedup, 1, 1e-5, 3).line()
    assert line == f"f0: μGraph {'a' * 16}, 1 kernel, {words}"
    assert ("faster" in line) == (speedup > 1.0)
