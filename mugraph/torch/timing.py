"""The module against the model, timed as its user calls them, when `mugraph.optimize` hands the module
over on a GPU. The cost model prices kernels; a call from Python also pays each kernel's launch, and at
decoding sizes those launches can outweigh what fusion saved (measured on an H200: README's rms_norm
module 0.21 ms a call against the model's 0.07 ms, while one CUDA-graph replay of each took 0.020 and
0.024 ms). The verdict then says so rather than claim the estimate."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

BUDGET_SECONDS = 1.0  # at most about this long for both, so that a large model is not run for minutes
MAX_CALLS = 50  # per function and round


@dataclass(frozen=True)
class Measured:
    """Median seconds of one call of the module and of the model on the example inputs."""

    device: str
    module_seconds: float
    model_seconds: float
    calls: int  # per function

    @property
    def ratio(self) -> float:
        """The model's time over the module's: above 1 where the module is faster."""
        return self.model_seconds / self.module_seconds if self.module_seconds > 0 else float("inf")

    def line(self) -> str:
        return (
            f"measured on {self.device}: {self.module_seconds * 1e3:.3f} ms a call against the model's "
            f"{self.model_seconds * 1e3:.3f} ms ({self.ratio:.2f}x; median of {self.calls} calls each)"
        )


def per_call_seconds(
    fns: Sequence[Callable[..., Any]], args: Sequence[Any], rounds: int = 3
) -> tuple[list[float], int]:
    """The median wall seconds of one call of each function on `args` (the device synchronised after
    each call, so that a call is what its caller waits for), rounds alternating between them; and
    the calls each got. One warm call each first (Triton compiles there), and the count fits a budget."""
    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)

    def once(f: Callable[..., Any]) -> float:
        t0 = time.perf_counter()
        f(*args)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    with torch.no_grad():
        first = [max(once(f), once(f)) for f in fns]  # the second call: compiled and warm
        per_round = max(1, min(MAX_CALLS, int(BUDGET_SECONDS / max(sum(first), 1e-6) / rounds)))
        times: list[list[float]] = [[] for _ in fns]
        for _ in range(rounds):
            for k, f in enumerate(fns):
                times[k] += [once(f) for _ in range(per_round)]
    return [sorted(t)[len(t) // 2] for t in times], per_round * rounds


def measure(module: Callable[..., Any], model: Callable[..., Any], args: Sequence[Any]) -> Measured:
    """The module and the model, timed side by side on `args`."""
    (mod, ref), calls = per_call_seconds([module, model], args)
    device = next((str(a.device) for a in args if isinstance(a, torch.Tensor)), "cpu")
    if device.startswith("cuda"):
        device = torch.cuda.get_device_name(torch.device(device))
    return Measured(device, mod, ref, calls)
