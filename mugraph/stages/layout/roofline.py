"""A roofline estimate of a μGraph's run time on a named GPU, from its traffic and FLOPs under
chosen layouts. Every term is kept, so a ranking says why one μGraph beats another.

Each kernel op is one launch. Its time is the launch overhead plus the largest of
  DRAM bytes / (DRAM bandwidth x u_dram), L2 bytes / (L2 bandwidth x u),
  shared-memory bytes / (smem bandwidth x u), tensor FLOPs / (tensor throughput x u)
                                                + other FLOPs / (CUDA-core throughput x u),
where u = min(1, blocks / SMs) is the share of SMs a grid keeps busy and u_dram = min(1, blocks x
dram_share_per_sm / SMs) (one SM can pull more than its even share of DRAM bandwidth). The sum of
all terms instead of their maximum (`no_overlap_seconds`, the time if nothing overlapped) breaks
ties between μGraphs bound by the same traffic: the one moving less through the other levels wins.

- A pre-defined kernel op (a library kernel) reads each input and writes its output once, uses the
  whole GPU, and runs matmuls on tensor cores.
- A graph-defined op reads each device tensor from DRAM once (tiles that several blocks share come
  from L2), while every block moves its own tiles through L2 on every for-loop iteration that needs
  them. A tile copy that cannot move 16-byte vectors counts twice on L2; a copy whose innermost dim
  differs from the device tensor's moves a 32-byte sector per element. Ops inside the block read and
  write shared memory (element-wise unary ops and `accum_no_red` are fused into their producer and
  move nothing); ops before the accumulators run once per iteration, the rest once.
- A block matmul runs on tensor cores when both operands can use `ldmatrix`, else on CUDA cores.
- A block graph whose shared memory (with padding) exceeds the profile's limit does not fit: its time
  is still estimated, and `fits` is false (a ranking puts such μGraphs last).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import prod
from typing import TypedDict, assert_never

from mugraph.ir.graph import BlockGraph, KernelGraph, Op
from mugraph.ir.types import DType, OpKind
from mugraph.stages.layout.costs import Layouts, contiguous, has_ldmatrix, is_wide, smem_capacity
from mugraph.stages.layout.facts import KERNEL, LayoutFacts, gather
from mugraph.stages.layout.profiles import GpuProfile

MODEL = "roofline-v1"
SECTOR_BYTES = 32
NARROW_COPY_FACTOR = 2
BOUNDS = ("dram", "l2", "smem", "compute")


class RooflineTotals(TypedDict):
    """An estimate's sums (the roofline's columns of a ranking row): traffic, FLOPs, launch time, the
    time each bound accounts for (`<bound>_bound_seconds`, launches apart), and the bound of most."""

    kernels: int
    dram_bytes: int
    l2_bytes: int
    smem_bytes: int
    flops: int
    tensor_flops: int
    simt_flops: int
    launch_seconds: float
    dram_bound_seconds: float
    l2_bound_seconds: float
    smem_bound_seconds: float
    compute_bound_seconds: float
    estimated_seconds: float
    fits: bool
    no_overlap_seconds: float
    bound: str


class RooflineJson(RooflineTotals):
    """An estimate as JSON: its profile and model, its totals, and every kernel's terms."""

    profile: str
    model: str
    per_kernel: list[dict[str, int | float | str]]  # KernelEstimate's fields


@dataclass(frozen=True, slots=True)
class KernelEstimate:
    op: int
    kind: str
    blocks: int
    dram_bytes: int
    l2_bytes: int
    smem_bytes: int  # shared-memory traffic
    smem_capacity: int  # shared memory one block allocates
    tensor_flops: int
    simt_flops: int
    launch_seconds: float
    dram_seconds: float
    l2_seconds: float
    smem_seconds: float
    compute_seconds: float
    seconds: float
    bound: str
    fits: bool


@dataclass(frozen=True, slots=True)
class Estimate:
    profile: str
    kernels: tuple[KernelEstimate, ...]

    @property
    def seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    @property
    def fits(self) -> bool:
        return all(k.fits for k in self.kernels)

    def totals(self) -> RooflineTotals:
        """The sums a ranking row shows, and the time each bound accounts for."""
        ks = self.kernels
        # sums of floats start at 0.0: a bound no kernel has is 0.0 seconds, not the int 0 (a typed reader of --json)
        by_bound = {b: sum((k.seconds - k.launch_seconds for k in ks if k.bound == b), 0.0) for b in BOUNDS}
        return {
            "kernels": len(ks),
            "dram_bytes": sum(k.dram_bytes for k in ks),
            "l2_bytes": sum(k.l2_bytes for k in ks),
            "smem_bytes": sum(k.smem_bytes for k in ks),
            "flops": sum(k.tensor_flops + k.simt_flops for k in ks),
            "tensor_flops": sum(k.tensor_flops for k in ks),
            "simt_flops": sum(k.simt_flops for k in ks),
            "launch_seconds": sum((k.launch_seconds for k in ks), 0.0),
            "dram_bound_seconds": by_bound["dram"],
            "l2_bound_seconds": by_bound["l2"],
            "smem_bound_seconds": by_bound["smem"],
            "compute_bound_seconds": by_bound["compute"],
            "estimated_seconds": self.seconds,
            "fits": self.fits,
            "no_overlap_seconds": sum(
                k.launch_seconds + k.dram_seconds + k.l2_seconds + k.smem_seconds + k.compute_seconds for k in ks
            ),
            "bound": max(BOUNDS, key=lambda b: by_bound[b]) if ks else "none",
        }

    def to_json(self) -> RooflineJson:
        return {
            "profile": self.profile,
            "model": MODEL,
            **self.totals(),
            "per_kernel": [asdict(k) for k in self.kernels],
        }


@dataclass(frozen=True, slots=True)
class _Rule:
    """What the model charges one op kind: its FLOPs per element of element-wise work, counted over
    its input for a reduction (else its output); whether it is fused into its producer inside a block
    graph (moves no shared memory); whether it is a matmul (FLOPs of its own, on tensor cores)."""

    flops: int
    reduces: bool = False
    fused: bool = False
    matmul: bool = False


def _rule(kind: OpKind) -> _Rule:
    match kind:
        case OpKind.MATMUL:
            return _Rule(0, matmul=True)
        case OpKind.ADD | OpKind.MUL | OpKind.DIV:
            return _Rule(1)
        case OpKind.CONCAT:
            return _Rule(0)
        case OpKind.MUL_SCALAR | OpKind.SQUARE | OpKind.SQRT | OpKind.EXP | OpKind.RELU:
            return _Rule(1, fused=True)
        case OpKind.CLAMP:
            return _Rule(2, fused=True)
        case OpKind.SILU:
            return _Rule(4, fused=True)
        case OpKind.GELU | OpKind.GELU_ERF:
            return _Rule(8, fused=True)
        case OpKind.REDUCTION:
            return _Rule(1, reduces=True)
        case OpKind.RMS_NORM:
            return _Rule(4, reduces=True)
        case OpKind.LAYER_NORM:  # mean, subtract, square, mean, sqrt, divide
            return _Rule(6, reduces=True)
        case OpKind.ACCUM_NO_RED:
            return _Rule(1, reduces=True, fused=True)
        case OpKind.ACCUM_SUM | OpKind.ACCUM_MEAN | OpKind.ACCUM_REDTOX:
            return _Rule(1, reduces=True)
        case OpKind.ACCUM_RMS:
            return _Rule(2, reduces=True)
        case OpKind.INPUT | OpKind.OUTPUT | OpKind.CUSTOMIZED:
            raise ValueError(f"{kind} has no roofline rule: estimate prices graph-defined ops and tile copies itself")
        case _ as unreachable:
            assert_never(unreachable)


def _elementwise_flops(g: KernelGraph | BlockGraph, op: Op, rule: _Rule) -> int:
    size = prod(g.tensors[op.inputs[0] if rule.reduces else op.outputs[0]].shape)
    return rule.flops * size


def _matmul_flops(g: KernelGraph | BlockGraph, op: Op) -> int:
    a, out = g.tensors[op.inputs[0]].shape, g.tensors[op.outputs[0]].shape
    return 2 * prod(out) * a[-1]


def _time(
    p: GpuProfile,
    blocks: int | None,
    dram: int,
    l2: int,
    smem: int,
    tflops: int,
    sflops: int,
) -> tuple[float, float, float, float]:
    u = 1.0 if blocks is None else min(1.0, blocks / p.sms)
    u_dram = 1.0 if blocks is None else min(1.0, blocks * p.dram_share_per_sm / p.sms)
    return (
        dram / (p.dram_bytes_per_s * u_dram),
        l2 / (p.l2_bytes_per_s * u),
        smem / (p.smem_bytes_per_s * u),
        tflops / (p.tensor_flops * u) + sflops / (p.simt_flops * u),
    )


def _fp32(g: KernelGraph | BlockGraph, op: Op) -> bool:
    """A float32 matmul runs on CUDA cores (codegen's default, full float32 products), at half the
    fp16 rate the profile's `simt_flops` gives: priced as twice its flops there."""
    return g.tensors[op.inputs[0]].dtype is DType.FLOAT32


def _kernel_op(g: KernelGraph, index: int, op: Op, p: GpuProfile) -> KernelEstimate:
    traffic = sum(g.tensors[i].nbytes for i in (*op.inputs, *op.outputs))
    rule = _rule(op.kind)
    tflops = _matmul_flops(g, op) if rule.matmul else 0
    sflops = _elementwise_flops(g, op, rule)
    if rule.matmul and _fp32(g, op):
        tflops, sflops = 0, sflops + 2 * _matmul_flops(g, op)
    return _finish(index, op, None, p, traffic, traffic, 0, 0, tflops, sflops, True)


def _block_op(g: KernelGraph, index: int, op: Op, facts: LayoutFacts, lay: Layouts, p: GpuProfile) -> KernelEstimate:
    bg = op.block
    assert bg is not None
    blocks = prod(bg.grid)
    dram = sum(g.tensors[i].nbytes for i in sorted(set(op.inputs))) + sum(g.tensors[i].nbytes for i in op.outputs)
    copies = {c.stensor: c for c in facts.copies if c.stensor[0] == index}
    l2 = smem = tflops = sflops = 0
    for bop in bg.ops:
        runs = bg.forloop if not any(bg.tensors[i].after_accum for i in (*bop.inputs, *bop.outputs)) else 1
        if bop.kind is OpKind.INPUT or bop.kind is OpKind.OUTPUT:  # a tile copy
            t = bg.tensors[bop.outputs[0] if bop.kind is OpKind.INPUT else bop.inputs[0]]
            c = copies[(index, t.index)]
            if contiguous(lay, c) is None:
                moved = prod(t.shape) * SECTOR_BYTES
            else:
                moved = t.nbytes * (1 if is_wide(facts, lay, c) else NARROW_COPY_FACTOR)
            l2 += moved * runs * blocks
            smem += t.nbytes * runs * blocks
            continue
        rule = _rule(bop.kind)
        if not rule.fused:
            smem += sum(bg.tensors[i].nbytes for i in (*bop.inputs, *bop.outputs)) * runs * blocks
        if rule.matmul:
            flops = _matmul_flops(bg, bop) * runs * blocks
            if _fp32(bg, bop):
                sflops += 2 * flops
            elif all(has_ldmatrix(facts, lay, (index, i)) for i in bop.inputs):
                tflops += flops
            else:
                sflops += flops
        else:
            sflops += _elementwise_flops(bg, bop, rule) * runs * blocks
    fits = smem_capacity(facts, lay, index) <= p.smem_per_block
    return _finish(index, op, blocks, p, dram, l2, smem, smem_capacity(facts, lay, index), tflops, sflops, fits)


def _finish(
    index: int,
    op: Op,
    blocks: int | None,
    p: GpuProfile,
    dram: int,
    l2: int,
    smem: int,
    capacity: int,
    tflops: int,
    sflops: int,
    fits: bool,
) -> KernelEstimate:
    parts = _time(p, blocks, dram, l2, smem, tflops, sflops)
    worst = max(range(len(BOUNDS)), key=lambda i: parts[i])
    seconds = p.launch_seconds + parts[worst]
    return KernelEstimate(
        index,
        str(op.kind),
        1 if blocks is None else blocks,
        dram,
        l2,
        smem,
        capacity,
        tflops,
        sflops,
        p.launch_seconds,
        *parts,
        seconds,
        BOUNDS[worst],
        fits,
    )


def estimate(graph: KernelGraph, layouts: Layouts, profile: GpuProfile, facts: LayoutFacts | None = None) -> Estimate:
    """The roofline estimate of `graph` under `layouts` on `profile`."""
    facts = facts if facts is not None else gather(graph)
    kernels = []
    for index, op in enumerate(graph.ops):
        match op.kind:
            case OpKind.INPUT | OpKind.OUTPUT:
                pass
            case OpKind.CUSTOMIZED:
                kernels.append(_block_op(graph, index, op, facts, layouts, profile))
            case _:
                kernels.append(_kernel_op(graph, index, op, profile))
    assert all(k[0] == KERNEL or k[0] in layouts.blocks for k in facts.shapes)
    return Estimate(profile.name, tuple(kernels))
