"""Time a μGraph executed with array operations in fp16, to know the roofline model's error.

Every kernel op runs as one array operation and every block graph as the float interpreter's
vectorised array code (all blocks at once, one step per for-loop iteration), on CuPy where a GPU is
present and NumPy elsewhere. This is not a generated CUDA kernel: it measures what the μGraph's
kernels cost as library calls, which bounds from above what a fused kernel would take. On NumPy the
figures are CPU times and say nothing about a GPU; they only exercise the code path.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from mugraph.arrays.backend import ArrayModule, backend_name, device_name, synchronize
from mugraph.ir.graph import KernelGraph
from mugraph.stages.verify.algebra import Float64Algebra
from mugraph.stages.verify.interpret import evaluate


@dataclass(frozen=True, slots=True)
class Measurement:
    backend: str
    device: str
    dtype: str
    repeats: int
    median_seconds: float
    min_seconds: float


def measure(
    graph: KernelGraph, xp: ArrayModule, *, repeats: int = 20, warmup: int = 3, seed: int = 0, dtype: str = "float16"
) -> Measurement:
    """Median and minimum wall time of one evaluation of `graph` on random inputs in [-0.1, 0.1)
    (small enough that exp of a 64-long dot product stays finite in fp16)."""
    rng = np.random.default_rng(seed)
    inputs = [xp.asarray(rng.uniform(-0.1, 0.1, t.shape).astype(dtype)) for t in graph.input_tensors]
    alg = Float64Algebra(xp)  # dtype-agnostic: it keeps the inputs' dtype
    times = []
    for i in range(warmup + repeats):
        synchronize(xp)
        t0 = time.perf_counter()
        evaluate(alg, graph, inputs)
        synchronize(xp)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return Measurement(backend_name(xp), device_name(xp), dtype, repeats, statistics.median(times), min(times))
