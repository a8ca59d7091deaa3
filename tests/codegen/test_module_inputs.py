"""What an emitted module takes: inputs of its dtype, or of one it widens without loss; a wider type
is refused, where it was once rounded to fp16 quietly (float32 values past 65504 came back inf)."""

from __future__ import annotations

import numpy as np
import pytest

from mugraph.codegen import EmitInfo, emit_module
from mugraph.codegen.check import load_module
from tests.helpers.emitting import narrow_rms_norm_reference


def test_a_wider_dtype_is_refused_and_a_narrower_one_taken() -> None:
    module = load_module(emit_module(narrow_rms_norm_reference(), EmitInfo("rms")), "rms_inputs")
    rng = np.random.default_rng(0)
    inputs = {n: rng.uniform(-1, 1, s).astype(np.float16) for n, s in module.INPUTS.items()}
    want = module.run(inputs)["O"]
    assert want.dtype == np.float16 and np.isfinite(want).all()
    with pytest.raises(TypeError, match="input 'X' is float32; the program takes float16"):
        module.run({**inputs, "X": inputs["X"].astype(np.float32) * 4e5})
    with pytest.raises(TypeError, match="input 'W' is int32"):
        module.run({**inputs, "W": np.ones(inputs["W"].shape, dtype=np.int32)})
    bools = {**inputs, "W": np.ones(inputs["W"].shape, dtype=bool)}  # widened without loss: taken
    assert np.array_equal(module.run(bools)["O"], module.run({**inputs, "W": np.ones_like(inputs["W"])})["O"])
