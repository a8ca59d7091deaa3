"""An estimate of the kernels `codegen` emits for a μGraph, not of an ideal kernel.

The roofline model prices each kernel as if it reached the GPU's peak at every level; measured on an
H100 the emitted Triton kernels take 1.4-2.9x that and its order of candidates is no order at all.
What the emitted code does instead, and what this model prices:

- A graph-defined op is one Triton launch of `prod(grid)` programs. Each program runs its for-loop
  serially: every iteration loads its input tiles (padded to the extents `ir.tiles.padded_shape`
  gives codegen, the padded share masked off; rows in whole 32-byte sectors), runs its block ops on
  the padded tiles (a concat through a scratch tile in L2), and waits a latency for its loads.
- Residency (`residency.py`): an SM holds as many programs as its registers and shared memory allow.
  They share its bandwidth and math but fill each other's latency, so an iteration of the SM takes
  the longer of one program's latency plus work and all resident programs' work. The busiest SM
  (`ceil(programs / SMs)` of them, in rounds of the resident count) sets the time.
- DRAM bandwidth is split over the SMs that have work: a grid of few programs reaches a fraction of
  peak, each SM drawing at most `sm_share` of an even share.
- Registers: a working set above 255 per thread spills; every op of the loop then stores and
  reloads the spilled part (a term that grows with the square of the spill). A candidate that
  spills, or comes within the model's error of it, is never "confident" (see `rank.py`): its price
  is the model's least sure.
- The kernel takes the longer of that serial time and its DRAM traffic at `dram_efficiency` of peak.
- A pre-defined op is a sequence of CuPy/cuBLAS calls (an element-wise op computed in float32 is
  several calls): each call costs `call_seconds` plus its traffic at the fitted share of DRAM
  bandwidth; a matmul's FLOPs at tensor-core peak bound it from below, and a batched matmul runs as
  cuBLAS does, one thread block per 128x128 output tile streaming its whole K-panel.
- A PyTorch model's ops run as PyTorch runs them (`emitted-v2-torch-linear-calls`): each pre-defined
  op one call, each norm with the weight and bias it takes in (`ir/affine_norms.py`) one call, and
  each matmul with its bias vector (`ir/affine_linear.py`) one call, in the reference (the model's
  code runs `F.layer_norm`, `F.linear`) and in a μGraph alike (the optimised module runs such a kept
  chain as that call, `torch/kernels.py`).

The constants in `EmittedConstants` are fitted on recorded H100 timings (benchmarks/data); the
rest are the profile's data-sheet numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil, gcd, prod
from typing import assert_never

from mugraph.ir.affine_linear import linear_biases
from mugraph.ir.affine_norms import affine_norms
from mugraph.ir.families import CostClass, Family, family_of, props
from mugraph.ir.graph import BlockGraph, KernelGraph, Op
from mugraph.ir.tiles import padded_shape
from mugraph.ir.types import DType, OpKind
from mugraph.stages.layout.cost_model import CostModel, CostTerms
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.profiles import GpuProfile
from mugraph.stages.layout.residency import residency

MODEL = "emitted-v2"
# the same, each pre-defined op priced as one call (a PyTorch model's ops), each norm with its weight and
# bias as one call, as F.layer_norm and F.rms_norm run them, and each matmul with its bias vector as one
# call, as F.linear and torch.addmm run it, in the model and in the optimised module
TORCH_MODEL = "emitted-v2-torch-linear-calls"
# the torch models of stores ranked before (they read back as they were ranked): the matmul and its
# bias add two calls (the norm with its weight and bias one)
TORCH_MODEL_NORM_CALLS = "emitted-v2-torch-norm-calls"
# the norm with its weight and bias one call in the reference alone, where the module ran a μGraph's as
# three calls
TORCH_MODEL_REFERENCE_NORMS = "emitted-v2-torch-norms"
# and before that, three calls everywhere
TORCH_MODEL_SEPARATE_AFFINE = "emitted-v2-torch"
TORCH_MODEL_PREFIX = TORCH_MODEL_SEPARATE_AFFINE  # every PyTorch model's name starts so
SECTOR = 32
CUBLAS_TILE = 128  # output tile of one cuBLAS thread block (M and N)


@dataclass(frozen=True, slots=True)
class EmittedConstants:
    """The few numbers fitted to measurements: the defaults are what benchmarks/bench_cost_model.py
    fits on the recorded H100 rows of the programs it does not hold out."""

    iteration_seconds: float = 0.2e-6  # latency of one for-loop iteration, hidden by other resident programs
    dram_efficiency: float = 0.7  # share of peak DRAM bandwidth the emitted kernels reach together
    sm_share: float = 3.0  # DRAM bandwidth one SM can draw, in units of bandwidth / SMs
    spill_bytes_per_s: float = 20e9  # local-memory traffic of one SM's spilled registers
    call_seconds: float = 3e-6  # one CuPy/cuBLAS call, launch and tail included
    library_efficiency: float = 0.7  # share of DRAM bandwidth a cuBLAS matmul reaches
    elementwise_efficiency: float = 0.2  # share of DRAM bandwidth a CuPy element-wise or reduction call reaches
    library_sm_share: float = 0.5  # DRAM bandwidth one cuBLAS thread block draws, in units of bandwidth / SMs
    launch_seconds: float = 3e-6  # one Triton launch
    # Each pre-defined op one call, as PyTorch runs a model's ops (its own fused kernels for norms and
    # activations), not the several array calls of the emitted module: the estimate for a PyTorch model.
    fused_pre_defined: bool = False
    # With fused_pre_defined, each norm and the weight mul and bias add after it as one call
    # (`ir/affine_norms.py`); `reference_norms_only`: only in a graph priced as written (a fragment's
    # reference), as stores ranked by `emitted-v2-torch-norms` were.
    affine_norms: bool = False
    reference_norms_only: bool = False
    # With fused_pre_defined, each matmul and the bias vector add after it as one call
    # (`ir/affine_linear.py`), in every graph.
    linear_bias: bool = False

    @property
    def model(self) -> str:
        """The name rows priced with these constants carry."""
        if not self.fused_pre_defined:
            return MODEL
        if not self.affine_norms:
            return TORCH_MODEL_SEPARATE_AFFINE
        if self.reference_norms_only:
            return TORCH_MODEL_REFERENCE_NORMS
        return TORCH_MODEL if self.linear_bias else TORCH_MODEL_NORM_CALLS

    def fuses_norms(self, as_written: bool) -> bool:
        """Whether a graph's norms take their weights and biases into one call (`as_written`: the graph
        is a fragment's reference)."""
        return self.fused_pre_defined and self.affine_norms and (as_written or not self.reference_norms_only)


CONSTANTS = EmittedConstants()


@dataclass(frozen=True, slots=True)
class KernelCost:
    op: int
    kind: str
    blocks: int
    waves: int  # rounds of resident programs on the busiest SM
    iterations: int
    block_seconds: float  # one round of the busiest SM's resident programs
    serial_seconds: float  # waves x block_seconds
    dram_seconds: float
    launch_seconds: float
    seconds: float
    bound: str
    resident: int = 1  # programs one SM runs at once
    spill_bytes: int = 0  # per program, registers that do not fit
    registers: int = 0  # per thread, the working set before spilling


def _sector_bytes(shape: tuple[int, ...], itemsize: int) -> float:
    """Bytes a tile load moves from DRAM: each row (the last dim) touches whole 32-byte sectors; a row
    of b bytes starting at a multiple of g = gcd(b, 32) touches (b + 32 - g) / 32 of them on average."""
    row = shape[-1] * itemsize
    sectors = (row + SECTOR - gcd(row, SECTOR)) / SECTOR
    return prod(shape[:-1]) * sectors * SECTOR


@dataclass(frozen=True, slots=True)
class _Work:
    """One program's traffic and math, per for-loop iteration and once (before or after the loop)."""

    loop_bytes: float  # from DRAM (or L2, for tiles other programs also read)
    loop_scratch: float  # concat's scratch tiles, stored and loaded back through L2
    loop_math: float  # seconds at one SM's throughput
    loop_latencies: int  # round trips to memory per iteration: the loads, and each concat's scratch tile
    loop_ops: int
    once_bytes: float
    once_math: float


def _block_work(bg: BlockGraph, p: GpuProfile) -> _Work:
    """What one program moves and computes: inputs with an fmap load every iteration (the others once,
    before the loop), math on padded tiles at one SM's share of throughput, outputs stored once."""
    tensor_sm, simt_sm = p.tensor_flops / p.sms, p.simt_flops / p.sms
    loop_bytes = loop_scratch = loop_math = once_bytes = once_math = 0.0
    latencies = 1
    ops = 0
    for bop in bg.ops:
        after = any(bg.tensors[i].after_accum for i in bop.inputs)  # an accumulator adds in the loop
        match family_of(bop.kind):
            case Family.BOUNDARY if bop.kind is OpKind.INPUT:
                t = bg.tensors[bop.outputs[0]]
                moved = _sector_bytes(t.shape, t.dtype.itemsize)
                if bop.int_attr("fmap") >= 0:
                    loop_bytes += moved
                else:
                    once_bytes += moved
                continue
            case Family.BOUNDARY:  # an output
                once_bytes += bg.tensors[bop.inputs[0]].nbytes
                continue
            case Family.DATA_MOVEMENT:  # both halves stored to a float32 scratch tile, then loaded whole
                ops += not after
                scratch = 2 * prod(padded_shape(bg.tensors[bop.outputs[0]].shape)) * 4
                if after:
                    once_bytes += scratch
                else:
                    loop_scratch += scratch
                    latencies += 1
                continue
            case Family.MATMUL:
                a = padded_shape(bg.tensors[bop.inputs[0]].shape)
                out = padded_shape(bg.tensors[bop.outputs[0]].shape)
                rate = simt_sm / 2 if bg.tensors[bop.inputs[0]].dtype is DType.FLOAT32 else tensor_sm
                work = 2 * prod(out) * a[-1] / rate
            case Family.REDUCTION | Family.ACCUMULATOR:  # math over the input tile
                work = prod(padded_shape(bg.tensors[bop.inputs[0]].shape)) / simt_sm
            case Family.UNARY | Family.BINARY | Family.NORM:  # math over the output tile
                work = prod(padded_shape(bg.tensors[bop.outputs[0]].shape)) / simt_sm
            case Family.GRAPH_DEFINED:
                raise ValueError("a graph-defined op inside a block graph has no emitted cost")
            case _ as unreachable:
                assert_never(unreachable)
        ops += not after
        if after:
            once_math += work
        else:
            loop_math += work
    return _Work(loop_bytes, loop_scratch, loop_math, latencies, ops, once_bytes, once_math)


def _graph_defined(g: KernelGraph, index: int, op: Op, p: GpuProfile, c: EmittedConstants) -> KernelCost:
    """Programs spread over the SMs; each SM runs up to `resident` of them at once, which share its
    bandwidth and math but overlap their per-iteration latency; the busiest SM sets the time. DRAM
    bandwidth is split over the SMs that have work, each drawing at most `sm_share` of an even share."""
    bg = op.block
    assert bg is not None
    blocks = prod(bg.grid)
    res = residency(bg, p)
    busy = min(blocks, p.sms)
    per_sm = ceil(blocks / p.sms)
    resident = min(res.blocks_per_sm, per_sm)
    rounds = ceil(per_sm / resident)
    bandwidth = p.dram_bytes_per_s * c.dram_efficiency
    bw_sm = min(p.dram_bytes_per_s / p.sms * c.sm_share, bandwidth / busy)
    w = _block_work(bg, p)
    # every op of the loop stores and reloads the spilled part of the working set, and the more of it
    # is spilled, the more of each op's operands are among it
    spill = res.spill_bytes * 2 * w.loop_ops * res.spill_bytes / res.register_bytes / c.spill_bytes_per_s
    busy_seconds = w.loop_bytes / bw_sm + w.loop_scratch / (p.l2_bytes_per_s / p.sms) + w.loop_math + spill
    # one program waits for its loads; the others resident on the SM fill that wait with their work
    iteration = max(w.loop_latencies * c.iteration_seconds + busy_seconds, resident * busy_seconds)
    round_seconds = bg.forloop * iteration + resident * (w.once_bytes / bw_sm + w.once_math)
    serial = rounds * round_seconds
    dram = (
        sum(g.tensors[i].nbytes for i in sorted(set(op.inputs))) + sum(g.tensors[i].nbytes for i in op.outputs)
    ) / bandwidth
    seconds = c.launch_seconds + max(serial, dram)
    return KernelCost(
        index,
        str(op.kind),
        blocks,
        rounds,
        bg.forloop,
        round_seconds,
        serial,
        dram,
        c.launch_seconds,
        seconds,
        "serial" if serial >= dram else "dram",
        resident,
        res.spill_bytes,
        res.registers,
    )


def _batched_matmul(g: KernelGraph, op: Op, p: GpuProfile, c: EmittedConstants) -> float:
    """A batched matmul as cuBLAS runs it: one thread block per 128x128 output tile of each batch, each
    streaming its whole K-panel of both operands at one SM's bandwidth (no split over K), so a few
    large-K tiles leave most SMs idle."""
    a, out = g.tensors[op.inputs[0]].shape, g.tensors[op.outputs[0]].shape
    batch, (m, n), k = prod(out[:-2]), out[-2:], a[-1]
    ctas = batch * ceil(m / CUBLAS_TILE) * ceil(n / CUBLAS_TILE)
    panel = (min(m, CUBLAS_TILE) + min(n, CUBLAS_TILE)) * k * g.tensors[op.inputs[0]].dtype.itemsize
    bw_sm = min(
        p.dram_bytes_per_s / p.sms * c.library_sm_share, p.dram_bytes_per_s * c.library_efficiency / min(ctas, p.sms)
    )
    return ceil(ctas / p.sms) * panel / bw_sm


def _pre_defined(
    g: KernelGraph, index: int, op: Op, p: GpuProfile, c: EmittedConstants, moved: Sequence[int] | None = None
) -> KernelCost:
    """The array calls one pre-defined op becomes in the emitted module (silu: neg, exp, add, div;
    rms_norm: square, mean, sqrt, div; layer_norm six; gelu seven), each streaming the op's data once
    (`moved`, where one call takes in the ops after it: the tensors it reads and writes)."""
    kind = props(op.kind)
    match kind.cost_class:
        case CostClass.LIBRARY:
            efficiency = c.library_efficiency
        case CostClass.ARRAY:
            efficiency = c.elementwise_efficiency
        case CostClass.FREE | CostClass.TRITON | CostClass.IN_BLOCK:
            raise ValueError(f"{op.kind} is not a pre-defined kernel op")
        case _ as unreachable:
            assert_never(unreachable)
    calls = 1 if c.fused_pre_defined else kind.array_calls
    traffic = sum(g.tensors[i].nbytes for i in (moved or (*op.inputs, *op.outputs))) * calls
    dram = traffic / (p.dram_bytes_per_s * efficiency)
    if op.kind is OpKind.MATMUL:
        a, out = g.tensors[op.inputs[0]].shape, g.tensors[op.outputs[0]].shape
        fp32 = g.tensors[op.inputs[0]].dtype is DType.FLOAT32  # CUDA cores at half the fp16 rate
        dram = max(dram, 2 * prod(out) * a[-1] / (p.simt_flops / 2 if fp32 else p.tensor_flops))
        if len(out) > 2 and prod(out[:-2]) > 1:
            dram = max(dram, _batched_matmul(g, op, p, c))
    launch = calls * c.call_seconds
    return KernelCost(index, str(op.kind), 1, 1, 1, dram, dram, dram, launch, launch + dram, "library")


EmittedTerms = CostTerms  # the sums of this model's estimate: the breakdown every cost model returns


@dataclass(frozen=True, slots=True)
class EmittedEstimate:
    profile: str
    kernels: tuple[KernelCost, ...]
    model: str = MODEL

    @property
    def seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    def terms(self) -> EmittedTerms:
        """The sums that say why one μGraph is estimated faster than another."""
        ks = self.kernels
        return {
            "model": self.model,
            "estimated_seconds": self.seconds,
            "launches": len(ks),
            "launch_seconds": sum(k.launch_seconds for k in ks),
            "serial_seconds": sum(k.serial_seconds for k in ks if k.bound == "serial"),
            "dram_seconds": sum(k.dram_seconds for k in ks if k.bound != "serial"),
            "waves": max((k.waves for k in ks), default=0),
            "iterations": sum(k.iterations for k in ks),
            "resident": min((k.resident for k in ks), default=1),
            "spill_bytes": sum(k.spill_bytes for k in ks),
            "registers": max((k.registers for k in ks), default=0),
        }


def estimate_emitted(
    graph: KernelGraph,
    profile: GpuProfile,
    constants: EmittedConstants = CONSTANTS,
    *,
    as_written: bool = False,
) -> EmittedEstimate:
    """The estimated run time of the module `codegen` emits for `graph` on `profile`; `as_written`, of
    `graph` as its source runs it (a fragment's reference; for `emitted-v2-torch-norms` alone that
    differs: only a reference's norm took its weight and bias into its call there)."""
    fused = affine_norms(graph) if constants.fuses_norms(as_written) else {}
    absorbed = {i for f in fused.values() for i in f.absorbed}
    linear = linear_biases(graph, absorbed) if constants.fused_pre_defined and constants.linear_bias else {}
    absorbed |= {f.add for f in linear.values()}
    moves = {i: f.tensors for i, f in fused.items()} | {i: f.tensors for i, f in linear.items()}
    kernels = []
    for index, op in enumerate(graph.ops):
        if index in absorbed:
            continue
        match props(op.kind).cost_class:
            case CostClass.FREE:
                pass
            case CostClass.TRITON:
                kernels.append(_graph_defined(graph, index, op, profile, constants))
            case CostClass.LIBRARY | CostClass.ARRAY | CostClass.IN_BLOCK:
                kernels.append(_pre_defined(graph, index, op, profile, constants, moves.get(index)))
            case _ as unreachable:
                assert_never(unreachable)
    return EmittedEstimate(profile.name, tuple(kernels), constants.model)


@dataclass(frozen=True, slots=True)
class EmittedModel:
    """This model as a `cost_model.CostModel`: it prices the kernels codegen emits, whatever the layout
    choice (codegen does not follow one yet), with `constants` fitted on measurements. `written`: it
    prices graphs as their source runs them (`as_written`), under the same name."""

    constants: EmittedConstants = CONSTANTS
    written: bool = False

    @property
    def name(self) -> str:
        return self.constants.model

    def predict(self, graph: KernelGraph, layouts: Layouts | None, profile: GpuProfile) -> CostTerms:
        return estimate_emitted(graph, profile, self.constants, as_written=self.written).terms()

    def price(self, graph: KernelGraph, layouts: Layouts | None, profile: GpuProfile) -> float:
        return estimate_emitted(graph, profile, self.constants, as_written=self.written).seconds

    def as_written(self) -> EmittedModel:
        """This model pricing a fragment's reference, the program as its source runs it."""
        return dataclasses.replace(self, written=True)


def written_model(model: CostModel) -> CostModel:
    """The model that prices a fragment's reference: `EmittedModel.as_written` (the same as any graph's
    price but for `emitted-v2-torch-norms`, which took a norm's weight and bias in only there); another
    model prices it as any graph."""
    return model.as_written() if isinstance(model, EmittedModel) else model


EMITTED = EmittedModel()
EMITTED_TORCH = EmittedModel(
    dataclasses.replace(CONSTANTS, fused_pre_defined=True, affine_norms=True, linear_bias=True)
)
# the torch models older stores' rows name: a matmul's bias add a call of its own; a reference's norm
# alone took its weight and bias in; none did
EMITTED_TORCH_NORM_CALLS = EmittedModel(dataclasses.replace(EMITTED_TORCH.constants, linear_bias=False))
EMITTED_TORCH_REFERENCE_NORMS = EmittedModel(
    dataclasses.replace(EMITTED_TORCH_NORM_CALLS.constants, reference_norms_only=True)
)
EMITTED_TORCH_SEPARATE_AFFINE = EmittedModel(dataclasses.replace(CONSTANTS, fused_pre_defined=True))
MODELS = {
    m.name: m
    for m in (
        EMITTED,
        EMITTED_TORCH,
        EMITTED_TORCH_NORM_CALLS,
        EMITTED_TORCH_REFERENCE_NORMS,
        EMITTED_TORCH_SEPARATE_AFFINE,
    )
}


def model_for(torch_ops: bool) -> EmittedModel:
    """The model that prices a run's μGraphs: `EMITTED_TORCH` where the kept ops run in PyTorch (a
    PyTorch model's run), else `EMITTED` (the emitted module's array calls)."""
    return EMITTED_TORCH if torch_ops else EMITTED


def model_named(name: str | None) -> EmittedModel:
    """The model a stored ranking row names (rows from before the PyTorch variant name emitted-v2; those
    of a PyTorch model ranked before its norms took their weights in, emitted-v2-torch, before the
    module ran a μGraph's norm with its weight and bias as one call, emitted-v2-torch-norms, or before
    a matmul took its bias in, emitted-v2-torch-norm-calls)."""
    return MODELS.get(name or MODEL, EMITTED)
