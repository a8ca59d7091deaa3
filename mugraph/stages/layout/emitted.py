"""An estimate of the kernels `codegen` emits for a μGraph, not of an ideal kernel.

The roofline model prices each kernel as if it reached the GPU's peak at every level; measured on an
H100 the emitted Triton kernels take 1.4-2.9x that and its order of candidates is no order at all.
What the emitted code does instead, and what this model prices:

- A graph-defined op is one Triton launch of `prod(grid)` programs. Each program runs its for-loop
  serially: every iteration loads its input tiles (padded to the extents `codegen.tiles.padded`
  gives, the padded share masked off), runs its block ops on the padded tiles, and waits a fixed
  latency (the loads of one iteration are not overlapped with the previous one's math). A program
  draws one SM's share of DRAM bandwidth (times `sm_share`, fitted). Programs beyond one per SM run
  in further waves. Work after the accumulators runs once per program.
- The kernel takes the longer of its waves' serial time and its DRAM traffic at full bandwidth.
- A pre-defined op is a sequence of CuPy/cuBLAS calls (an element-wise op computed in float32 is
  several calls): each call costs `call_seconds` plus its traffic at `library_efficiency` of DRAM
  bandwidth; a matmul's FLOPs at tensor-core peak bound it from below.

The constants in `EmittedConstants` are fitted on recorded H100 timings (benchmarks/data); the
rest are the profile's data-sheet numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, gcd, prod
from typing import Any

from mugraph.ir.graph import BlockGraph, KernelGraph, Op
from mugraph.ir.tiles import padded_shape
from mugraph.ir.types import ACCUMULATORS, OpKind
from mugraph.stages.layout.profiles import GpuProfile

MODEL = "emitted-v1"
SECTOR = 32

# array calls one pre-defined op becomes in the emitted module (silu: neg, exp, add, div; rms_norm:
# square, mean, sqrt, div) and how many times each call streams the op's output-sized data
_CALLS = {OpKind.SILU: 4, OpKind.GELU: 7, OpKind.RMS_NORM: 4, OpKind.CLAMP: 1}


@dataclass(frozen=True, slots=True)
class EmittedConstants:
    """The few numbers fitted to measurements: the defaults are what benchmarks/bench_cost_model.py
    fits on the recorded H100 rows of the programs it does not hold out."""

    iteration_seconds: float = 0.3e-6  # latency of one for-loop iteration of one program
    sm_share: float = 0.75  # DRAM bandwidth one program draws, in units of bandwidth / SMs
    call_seconds: float = 3e-6  # one CuPy/cuBLAS call, launch and tail included
    library_efficiency: float = 0.6  # share of DRAM bandwidth a library call reaches
    launch_seconds: float = 3e-6  # one Triton launch


CONSTANTS = EmittedConstants()


@dataclass(frozen=True, slots=True)
class KernelCost:
    op: int
    kind: str
    blocks: int
    waves: int
    iterations: int
    block_seconds: float  # one program's serial time
    serial_seconds: float  # waves x block_seconds
    dram_seconds: float
    launch_seconds: float
    seconds: float
    bound: str


def _padded_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    return prod(padded_shape(shape)) * itemsize


def _sector_bytes(shape: tuple[int, ...], itemsize: int) -> float:
    """Bytes a tile load moves from DRAM: each row (the last dim) touches whole 32-byte sectors; a row
    of b bytes starting at a multiple of g = gcd(b, 32) touches (b + 32 - g) / 32 of them on average."""
    row = shape[-1] * itemsize
    sectors = (row + SECTOR - gcd(row, SECTOR)) / SECTOR
    return prod(shape[:-1]) * sectors * SECTOR


def _block_work(bg: BlockGraph, p: GpuProfile, c: EmittedConstants) -> tuple[float, float]:
    """(seconds of one for-loop iteration, seconds after the loop) of one program."""
    bw_sm = p.dram_bytes_per_s / p.sms * c.sm_share
    tensor_sm, simt_sm = p.tensor_flops / p.sms, p.simt_flops / p.sms
    loop = c.iteration_seconds
    post = 0.0
    for bop in bg.ops:
        after = any(bg.tensors[i].after_accum for i in (*bop.inputs, *bop.outputs))
        if bop.kind is OpKind.INPUT:
            t = bg.tensors[bop.outputs[0]]
            loop += _sector_bytes(t.shape, t.dtype.itemsize) / bw_sm
            continue
        if bop.kind is OpKind.OUTPUT:
            t = bg.tensors[bop.inputs[0]]
            post += t.nbytes / bw_sm
            continue
        if bop.kind is OpKind.MATMUL:
            a = padded_shape(bg.tensors[bop.inputs[0]].shape)
            out = padded_shape(bg.tensors[bop.outputs[0]].shape)
            work = 2 * prod(out) * a[-1] / tensor_sm
        else:
            src = bop.inputs[0] if bop.kind in ACCUMULATORS or bop.kind is OpKind.REDUCTION else bop.outputs[0]
            work = prod(padded_shape(bg.tensors[src].shape)) / simt_sm
        if after:
            post += work
        else:
            loop += work
    return loop, post


def _graph_defined(g: KernelGraph, index: int, op: Op, p: GpuProfile, c: EmittedConstants) -> KernelCost:
    bg = op.block
    assert bg is not None
    blocks = prod(bg.grid)
    waves = ceil(blocks / p.sms)
    loop, post = _block_work(bg, p, c)
    block_seconds = bg.forloop * loop + post
    serial = waves * block_seconds
    dram = (sum(g.tensors[i].nbytes for i in sorted(set(op.inputs))) +
            sum(g.tensors[i].nbytes for i in op.outputs)) / p.dram_bytes_per_s
    seconds = c.launch_seconds + max(serial, dram)
    return KernelCost(index, str(op.kind), blocks, waves, bg.forloop, block_seconds, serial, dram,
                      c.launch_seconds, seconds, "serial" if serial >= dram else "dram")


def _pre_defined(g: KernelGraph, index: int, op: Op, p: GpuProfile, c: EmittedConstants) -> KernelCost:
    calls = _CALLS.get(op.kind, 1)
    traffic = sum(g.tensors[i].nbytes for i in (*op.inputs, *op.outputs)) * calls
    dram = traffic / (p.dram_bytes_per_s * c.library_efficiency)
    if op.kind is OpKind.MATMUL:
        a, out = g.tensors[op.inputs[0]].shape, g.tensors[op.outputs[0]].shape
        dram = max(dram, 2 * prod(out) * a[-1] / p.tensor_flops)
    launch = calls * c.call_seconds
    return KernelCost(index, str(op.kind), 1, 1, 1, dram, dram, dram, launch, launch + dram, "library")


@dataclass(frozen=True, slots=True)
class EmittedEstimate:
    profile: str
    kernels: tuple[KernelCost, ...]

    @property
    def seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    def terms(self) -> dict[str, Any]:
        """The sums that say why one μGraph is estimated faster than another."""
        ks = self.kernels
        return {"model": MODEL, "estimated_seconds": self.seconds, "launches": len(ks),
                "launch_seconds": sum(k.launch_seconds for k in ks),
                "serial_seconds": sum(k.serial_seconds for k in ks if k.bound == "serial"),
                "dram_seconds": sum(k.dram_seconds for k in ks if k.bound != "serial"),
                "waves": max((k.waves for k in ks), default=0),
                "iterations": sum(k.iterations for k in ks)}


def estimate_emitted(graph: KernelGraph, profile: GpuProfile, constants: EmittedConstants = CONSTANTS,
                     ) -> EmittedEstimate:
    """The estimated run time of the module `codegen` emits for `graph` on `profile`."""
    kernels = []
    for index, op in enumerate(graph.ops):
        if op.kind is OpKind.INPUT or op.kind is OpKind.OUTPUT:
            continue
        if op.kind is OpKind.CUSTOMIZED:
            kernels.append(_graph_defined(graph, index, op, profile, constants))
        else:
            kernels.append(_pre_defined(graph, index, op, profile, constants))
    return EmittedEstimate(profile.name, tuple(kernels))
