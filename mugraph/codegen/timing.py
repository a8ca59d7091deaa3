"""Time an emitted module compiled for a CUDA device: what the GPU, not the roofline model, says a
μGraph costs (Mirage ranks its candidates by profiling them the same way).

One run is the module's `run(inputs)` on fp16 CuPy arrays: its Triton kernels and its array calls
(CuPy, cuBLAS), launched in order on the default stream. Each timed run is bracketed by two CUDA
events and preceded by
- a write of a buffer larger than L2, so every run starts with the weights in DRAM, as a layer of a
  real model finds them (Triton's `do_bench` flushes the same way), and
- a spin kernel that keeps the GPU busy while Python enqueues the run, so the events measure the
  kernels and the gaps between them, not Python's launch overhead (tens of microseconds per launch,
  more than many of these kernels take). The host's own time per run is reported beside it.

The result is the median of `repeats` runs after `warmup` untimed ones (the first compiles), with
the module's error against the float64 reference on the same inputs.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any, TypedDict, cast

from mugraph.arrays.backend import ArrayModule, cupy_available, device_name, get_array_module, synchronize
from mugraph.codegen.check import FP16_TOLERANCE, check_inputs, compare, load_module, reference_outputs
from mugraph.codegen.errors import CodegenError
from mugraph.ir.graph import KernelGraph

L2_FLUSH_BYTES = 256 << 20  # larger than any current GPU's L2 (H100 50 MB, H200 60 MB)
MIN_REPEATS = 20

_SPIN = r"""
extern "C" __global__ void mugraph_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


class TimingRecord(TypedDict):
    """`KernelTiming` as JSON: what a GPU worker's measurement record and `mugraph emit --time` hold."""

    device: str
    median_seconds: float
    min_seconds: float
    host_seconds: float
    repeats: int
    warmup: int
    first_run_seconds: float
    max_rel_err: float
    ok: bool
    l2_flushed: bool


@dataclass(frozen=True, slots=True)
class KernelTiming:
    """Device time of one run (median and minimum over `repeats`), the host's wall time of one
    synchronous run, the first run's time (compiling the kernels), and the error of the outputs."""

    device: str
    median_seconds: float
    min_seconds: float
    host_seconds: float
    repeats: int
    warmup: int
    first_run_seconds: float
    max_rel_err: float
    ok: bool
    l2_flushed: bool

    def as_dict(self) -> TimingRecord:
        return cast(TimingRecord, asdict(self))


class _Bench:
    """The device-side helpers of one timing: the L2 flush buffer, the spin kernel and its clock."""

    def __init__(self, xp: ArrayModule) -> None:
        self.xp = xp
        self.flush = xp.empty(L2_FLUSH_BYTES // 4, dtype=xp.int32)
        self.spin = xp.RawKernel(_SPIN, "mugraph_spin")
        self.cycles_per_s = self._calibrate()

    def _calibrate(self, cycles: int = 20_000_000) -> float:
        """SM clock cycles per second, from timing the spin kernel itself (the clock under load)."""
        xp = self.xp
        self.spin((1,), (1,), (xp.int64(cycles // 10),))  # loads the module, wakes the clocks
        start, end = xp.cuda.Event(), xp.cuda.Event()
        start.record()
        self.spin((1,), (1,), (xp.int64(cycles),))
        end.record()
        end.synchronize()
        return cycles / (float(xp.cuda.get_elapsed_time(start, end)) * 1e-3)

    def hide_host(self, seconds: float) -> None:
        """Flush L2, then keep the GPU busy for `seconds`, long enough for the host to enqueue a run."""
        self.flush.fill(0)
        self.busy(seconds)

    def busy(self, seconds: float) -> None:
        self.spin((1,), (1,), (self.xp.int64(int(seconds * self.cycles_per_s)),))


def time_module(
    module: ModuleType,
    reference: KernelGraph,
    *,
    repeats: int = 50,
    warmup: int = 5,
    seed: int = 0,
    tolerance: float = FP16_TOLERANCE,
    flush_l2: bool = True,
) -> KernelTiming:
    """Time a loaded module's `run()` on the device (see the module docstring)."""
    if repeats < MIN_REPEATS:
        raise CodegenError(f"time at least {MIN_REPEATS} runs for a median (asked for {repeats})")
    if not getattr(module, "ON_GPU", False):
        raise CodegenError("the module did not find a CUDA device (its ON_GPU is false); timing needs one")
    xp = get_array_module("cupy")
    host = check_inputs(reference, seed)
    expected = reference_outputs(reference, host)
    inputs = {k: xp.asarray(v) for k, v in host.items()}
    bench = _Bench(xp)
    synchronize(xp)
    t0 = time.perf_counter()
    try:
        outputs = module.run(inputs)
        synchronize(xp)
    except Exception as e:  # a kernel Triton cannot compile, or a launch the device refuses
        text = str(e).strip().splitlines()
        raise CodegenError(f"the module failed on the GPU: {type(e).__name__}: {text[-1] if text else ''}") from e
    first = time.perf_counter() - t0
    errs = compare(outputs, expected)
    worst = max(errs.values()) if errs else 0.0
    host_times = []
    for _ in range(max(warmup, 3)):
        synchronize(xp)
        t0 = time.perf_counter()
        module.run(inputs)
        synchronize(xp)
        host_times.append(time.perf_counter() - t0)
    host_seconds = statistics.median(host_times)
    cover = 2 * host_seconds + 50e-6  # the spin outlasts the host's enqueueing of one run
    pairs = []
    for _ in range(repeats):
        if flush_l2:
            bench.hide_host(cover)
        else:
            bench.busy(cover)
        start, end = xp.cuda.Event(), xp.cuda.Event()
        start.record()
        module.run(inputs)
        end.record()
        pairs.append((start, end))
        end.synchronize()
    times = [xp.cuda.get_elapsed_time(s, e) * 1e-3 for s, e in pairs]
    return KernelTiming(
        device_name(xp),
        statistics.median(times),
        min(times),
        host_seconds,
        repeats,
        max(warmup, 3),
        first,
        worst,
        worst <= tolerance,
        flush_l2,
    )


def time_source(source: str, reference: KernelGraph, **kwargs: Any) -> KernelTiming:
    """Compile an emitted module's text for the CUDA device and time it (keyword arguments as
    `time_module`). One clear error where no device is usable."""
    if not cupy_available():
        raise CodegenError("timing a module needs CuPy and a usable CUDA device; none was found")
    return time_module(load_module(source, "mugraph_timed", interpret=False), reference, **kwargs)
