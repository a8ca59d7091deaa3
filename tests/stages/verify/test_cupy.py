"""CuPy parity: the same fingerprints on the GPU as on NumPy. Runs with `-m gpu` on a CUDA machine."""

from __future__ import annotations

import numpy as np
import pytest

from mugraph.arrays.backend import cupy_available, get_array_module, to_numpy
from mugraph.stages.verify.check import ReferenceFingerprints, check_equivalence
from tests.helpers.builtin import EXPERTS, PROGRAMS, reference, reference_fingerprints

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cupy_available(), reason="CuPy with a usable CUDA device is not available"),
]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_reference_fingerprints_equal_numpy(name: str) -> None:
    cp = get_array_module("cupy")
    gpu = ReferenceFingerprints(reference(name), (0, 1, 2), xp=cp)
    cpu = reference_fingerprints(name)
    for g_outs, c_outs in zip(gpu.outputs, cpu.outputs, strict=True):
        for g, c in zip(g_outs, c_outs, strict=True):
            np.testing.assert_array_equal(to_numpy(g), c)


@pytest.mark.parametrize(("name", "label"), EXPERTS)
def test_experts_equivalent_on_cupy(name: str, label: str) -> None:
    cp = get_array_module("cupy")
    r = check_equivalence(reference(name), PROGRAMS[name].experts[label](), xp=cp)
    assert r.equivalent, r.reason
    assert r.float_max_rel_err is not None and r.float_max_rel_err < 1e-6
