"""Run an emitted module in Triton's interpreter on the CPU and compare it with the float64 reference.

Inputs are fp16, uniform in [-0.1, 0.1) (as the layout stage's timing uses: small enough that exp of
a 64-long dot product stays well inside fp16's range); the reference program runs in the float64
interpreter on exactly those fp16 values. The error is max |out - ref| / max |ref| per output.

Tolerance, FP16_TOLERANCE = 5e-3: fp16 keeps 11 significant bits, so every rounding to fp16 costs up
to 2^-11 ≈ 4.9e-4 of the value. The module rounds the output, every device tensor between kernels,
and the computed tile operands of each block matmul (fp16 into tl.dot, as Mirage's shared memory
holds fp16), and exp turns an absolute error of its argument into a relative one. 5e-3 allows about
ten such roundings on the path to an output; every benchmark's reference, experts and best μGraph
measure below 1e-3 (benchmarks/RESULTS.md), while a wrong μGraph (a wrong map, accumulator or
operand order) reads or combines other elements and is off by several percent (a swapped Q·K in
gqa, whose exp is near 1 at these inputs) to hundreds of percent.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import importlib.util
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from mugraph.arrays.backend import to_numpy
from mugraph.codegen.errors import KERNELS_EXTRA_HINT, CodegenError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import DType, OpKind
from mugraph.stages.verify.algebra import Float64Algebra
from mugraph.stages.verify.interpret import evaluate

FP16_TOLERANCE = 5e-3
# float32 programs: 24 significant bits (2^-24 ≈ 6e-8 a rounding) and full float32 products in tl.dot,
# so 1e-5 leaves room for long sums while a wrong μGraph is still off by percents. TF32 products
# (`EmitInfo.tf32`) keep 11 bits, as fp16 does: check those against FP16_TOLERANCE.
FP32_TOLERANCE = 1e-5
INPUT_RANGE = 0.1


@dataclass(frozen=True)
class CheckReport:
    """The verdict of one interpreted run: `ok` when every output is within `tolerance`."""

    ok: bool
    max_rel_err: float
    per_output: dict[str, float]
    interpreted: bool
    seconds: float
    tolerance: float


def require_triton(hint: str = KERNELS_EXTRA_HINT) -> None:
    """One clear error where Triton is missing (it is an optional extra), ending in `hint` (what needs
    it, how to install it). Found, not imported: Triton reads TRITON_INTERPRET when it is first imported."""
    if importlib.util.find_spec("triton") is None:
        raise CodegenError(f"Triton is not installed; {hint}")


_loaded = itertools.count()


@functools.cache
def _module_folder() -> Path:
    """One folder per process for the modules it loads, removed when the process exits."""
    folder = Path(tempfile.mkdtemp(prefix="mugraph-emit-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def load_module(source: str, name: str = "mugraph_emitted", *, interpret: bool = True) -> ModuleType:
    """Import an emitted module's text, with Triton's interpreter on (the CPU check) or off (compiled
    for a CUDA device). TRITON_INTERPRET must be set before Triton is first imported (its language
    functions are made then), so one process runs kernels one way only; @triton.jit reads the source
    back from a file, so the text goes through one."""
    require_triton()
    was = os.environ.get("TRITON_INTERPRET") == "1"
    if "triton" in sys.modules and was != interpret:
        how = "with" if was else "without"
        raise CodegenError(
            f"Triton was imported in this process {how} TRITON_INTERPRET=1; run the "
            f"{'check' if interpret else 'timing'} in a fresh process (mugraph emit --check does)"
        )
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    name = f"{name}_{next(_loaded)}"  # a fresh module (and file) for every load
    path = _module_folder() / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton looks a kernel's module up by name
    try:
        spec.loader.exec_module(module)
    except ImportError as e:
        raise CodegenError(
            f"the emitted module cannot import {e.name or 'a module'} ({e}); {KERNELS_EXTRA_HINT}"
        ) from None
    except Exception as e:
        raise CodegenError(f"the emitted module does not import: {type(e).__name__}: {e}") from e
    return module


def check_inputs(reference: KernelGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Uniform inputs in the reference's dtype (float32 for a float32 input, else fp16)."""
    rng = np.random.default_rng([seed, 0xC0DE])
    return {
        name: rng.uniform(-INPUT_RANGE, INPUT_RANGE, size=shape).astype(
            np.float32 if dtype is DType.FLOAT32 else np.float16
        )
        for name, shape, dtype in reference.input_signature()
    }


def default_tolerance(reference: KernelGraph) -> float:
    """FP32_TOLERANCE for a program whose inputs are all float32, else FP16_TOLERANCE."""
    sig = reference.input_signature()
    return FP32_TOLERANCE if sig and all(d is DType.FLOAT32 for _, _, d in sig) else FP16_TOLERANCE


def reference_outputs(reference: KernelGraph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference program in float64 on the given (fp16) inputs, by output name."""
    arrays = [inputs[name].astype(np.float64) for name, _, _ in reference.input_signature()]
    outs = evaluate(Float64Algebra(np), reference, arrays)
    names = [str(op.attr("name")) for op in reference.ops_of(OpKind.OUTPUT)]
    return dict(zip(names, outs, strict=True))


def compare(outputs: Mapping[str, Any], expected: Mapping[str, np.ndarray]) -> dict[str, float]:
    """max |out - ref| / max |ref| per output (inf for a missing, misshapen or non-finite output)."""
    errs: dict[str, float] = {}
    for name, ref in expected.items():
        got = outputs.get(name)
        if got is None or tuple(np.shape(got)) != ref.shape:
            errs[name] = float("inf")
            continue
        diff = np.abs(to_numpy(got).astype(np.float64) - ref)
        scale = max(float(np.max(np.abs(ref))), np.finfo(np.float64).tiny)
        worst = float(np.max(diff)) / scale
        errs[name] = worst if np.isfinite(worst) else float("inf")
    return errs


def check_source(
    source: str,
    reference: KernelGraph,
    *,
    seed: int = 0,
    tolerance: float | None = None,
    interpret: bool = True,
) -> CheckReport:
    """Run the module's `run()` in Triton's interpreter (or compiled, on a CUDA device, with
    `interpret=False`) and compare it with `reference` in float64 (tolerance: `default_tolerance`)."""
    module = load_module(source, interpret=interpret)
    return check_module(module, reference, seed=seed, tolerance=tolerance)


def check_module(
    module: ModuleType, reference: KernelGraph, *, seed: int = 0, tolerance: float | None = None
) -> CheckReport:
    """Run a loaded module's `run()` once on the check inputs and compare it with `reference`."""
    if tolerance is None:
        tolerance = default_tolerance(reference)
    inputs = check_inputs(reference, seed)
    expected = reference_outputs(reference, inputs)
    t0 = time.perf_counter()
    try:
        with np.errstate(invalid="ignore", divide="ignore"):  # padded lanes may hold 0/0 until masked to 0
            outputs = module.run(inputs)
    except Exception as e:
        where = "in Triton's interpreter" if not getattr(module, "ON_GPU", False) else "on the GPU"
        raise CodegenError(
            f"the emitted module failed {where}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from e
    seconds = time.perf_counter() - t0
    errs = compare(outputs, expected)
    worst = max(errs.values()) if errs else 0.0
    return CheckReport(worst <= tolerance, worst, errs, not bool(getattr(module, "ON_GPU", False)), seconds, tolerance)
