"""Measuring a μGraph's run time: the NumPy path here, the CuPy path with `-m gpu` on a CUDA machine."""

from __future__ import annotations

import numpy as np
import pytest

from mugraph.arrays.backend import cupy_available, get_array_module, to_numpy
from mugraph.programs import builtin_programs
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.measure import measure
from mugraph.stages.layout.profiles import PROFILES
from mugraph.stages.layout.roofline import estimate
from mugraph.stages.verify.algebra import Float64Algebra
from mugraph.stages.verify.interpret import evaluate


def test_measure_on_numpy_times_every_repeat() -> None:
    g = builtin_programs()["ntrans"].experts["saved_i"]()
    m = measure(g, np, repeats=5, warmup=1)
    assert m.backend == "numpy" and m.device == "cpu" and m.dtype == "float16" and m.repeats == 5
    assert 0 < m.min_seconds <= m.median_seconds < 10


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="CuPy with a usable CUDA device is not available")
@pytest.mark.parametrize("name", sorted(n for n, p in builtin_programs().items() if p.experts))
def test_measure_on_cupy_in_fp16(name: str) -> None:
    """The expert and the reference run in fp16 on the GPU: outputs close to float64, times recorded
    next to the H100 estimate (the benchmark writes the table)."""
    cp = get_array_module("cupy")
    prog = builtin_programs()[name]
    ref, expert = prog.reference(), next(iter(prog.experts.values()))()
    rng = np.random.default_rng(1)
    xs = [rng.uniform(-0.1, 0.1, t.shape) for t in ref.input_tensors]
    want = evaluate(Float64Algebra(np), ref, xs)[0]
    got = to_numpy(evaluate(Float64Algebra(cp), expert, [cp.asarray(x.astype("float16")) for x in xs])[0])
    assert np.max(np.abs(got.astype(np.float64) - want)) <= 2e-2 * max(1.0, float(np.max(np.abs(want))))
    for g in (ref, expert):
        m = measure(g, cp, repeats=10)
        assert m.backend == "cupy" and m.device != "cpu" and m.median_seconds > 0
        assert estimate(g, choose_layouts(g).layouts, PROFILES["H100"]).seconds > 0
