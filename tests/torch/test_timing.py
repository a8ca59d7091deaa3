"""The module against the model, timed as called: the median of alternating calls, a count that fits
the budget, and a verdict that states a slower module rather than claim its estimate. (On a GPU,
`mugraph.optimize` times its module this way: test_cuda.py.)"""

from __future__ import annotations

import time

import torch

from mugraph.torch.timing import BUDGET_SECONDS, Measured, measure, per_call_seconds
from mugraph.torch.verdict import FragmentVerdict, Verdict


def test_the_slower_function_is_measured_slower_and_the_count_fits_the_budget() -> None:
    x = torch.zeros(4)
    (fast, slow), calls = per_call_seconds([lambda t: t + 1, lambda t: time.sleep(0.1)], [x])
    assert slow >= 0.1 > fast
    assert 3 <= calls <= 3 * int(BUDGET_SECONDS / 0.1 / 3)  # about a second, not MAX_CALLS of 0.1 s each


def test_measure_names_the_device_and_orders_the_two() -> None:
    x = torch.zeros(64, 64)
    m = measure(lambda t: t @ t, lambda t: [t @ t for _ in range(50)], [x])
    assert m.device == "cpu" and m.calls >= 3 and m.ratio > 1.0


def verdict(measured: Measured | None) -> Verdict:
    frag = FragmentVerdict("f0", "ab" * 8, 1.36, 2, 2e-5, 46)
    return Verdict("m", True, False, (frag,), (), "s.zarr", None, "H100", measured=measured)


def test_a_module_measured_slower_is_not_called_faster_and_the_verdict_says_why() -> None:
    slower = verdict(Measured("NVIDIA H200", 2.1e-4, 0.7e-4, 150))
    assert not slower.faster
    text = "\n".join(slower.lines())
    assert "measured on NVIDIA H200: 0.210 ms a call against the model's 0.070 ms (0.33x" in text
    assert "slower than the model as called from Python" in text and "CUDA graph" in text
    faster = verdict(Measured("NVIDIA H200", 0.5e-4, 0.7e-4, 150))
    assert faster.faster and "slower than the model" not in "\n".join(faster.lines())
    assert verdict(None).faster  # not timed (Triton's interpreter): the estimate stands
