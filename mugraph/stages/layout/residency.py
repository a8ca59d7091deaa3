"""How many programs of one emitted Triton kernel an SM holds at once, and how much of a program's
working set spills out of the register file.

A program (one block of the grid) keeps its tiles in registers: each input tile as loaded (fp16,
padded to the extents `tiles.padded_shape` gives codegen), each tile an op computes in the loop as
float32, each accumulator's running tile as float32 (an accumulator that reduces over the last dim
keeps the whole input tile until after the loop), and an fp16 copy of a computed matmul operand.
Ops after the accumulators run once, after the loop, on small tiles: they are not counted. The
program runs `tiles.NUM_WARPS` warps; a thread holds at most 255 registers, so a working set above
that spills to local memory, which the loop then reads and writes on every iteration. Programs per SM
are bounded by the register file, shared memory (the pipelined input tiles) and the hardware's 32.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from mugraph.ir.graph import BlockGraph
from mugraph.ir.tiles import NUM_STAGES, THREADS, padded_shape
from mugraph.ir.types import ACCUMULATORS, OpKind
from mugraph.stages.layout.profiles import GpuProfile

REGISTERS_PER_SM = 65536
MAX_REGISTERS = 255  # per thread
BASE_REGISTERS = 32  # indices, pointers, masks and loop state of every program
MAX_BLOCKS_PER_SM = 32
SMEM_PER_SM = 228 * 1024
F32 = 4


@dataclass(frozen=True, slots=True)
class Residency:
    registers: int  # per thread, before spilling
    spill_bytes: int  # per program: the working set above 255 registers per thread
    register_bytes: int  # per program: the registers it may hold (255 per thread)
    smem_bytes: int  # per program: pipelined input tiles
    blocks_per_sm: int


def _elements(shape: tuple[int, ...]) -> int:
    return prod(padded_shape(shape))


def register_bytes(bg: BlockGraph) -> int:
    """The most bytes the program holds at once in its loop. A tile is held from
    the op that makes it (an input tile: from the top of the loop) to its last use in the loop; an
    accumulator's running tile for the whole loop; a computed matmul operand's fp16 copy during the
    matmul."""
    loop = [
        b
        for b in bg.ops
        if b.kind is not OpKind.OUTPUT and (b.kind is OpKind.INPUT or not bg.tensors[b.inputs[0]].after_accum)
    ]
    size: dict[int, int] = {}
    born: dict[int, int] = {}
    last: dict[int, int] = {}
    computed: set[int] = set()
    held = 0  # accumulators' running tiles
    for pos, bop in enumerate(loop):
        for i in bop.inputs:
            last[i] = pos
        if bop.kind is OpKind.INPUT:
            t = bg.tensors[bop.outputs[0]]
            size[t.index], born[t.index] = _elements(t.shape) * t.dtype.itemsize, 0
        elif bop.kind in ACCUMULATORS:  # the running tile has the input's shape until after the loop
            held += _elements(bg.tensors[bop.inputs[0]].shape) * F32
        else:
            for o in bop.outputs:
                size[o], born[o] = _elements(bg.tensors[o].shape) * F32, pos
                computed.add(o)
    peak = 0
    for pos, bop in enumerate(loop):
        live = sum(n for t, n in size.items() if born[t] <= pos <= last.get(t, born[t]))
        if bop.kind is OpKind.MATMUL:
            live += sum(size[i] // 2 for i in bop.inputs if i in computed)
        peak = max(peak, live)
    return peak + held


def residency(bg: BlockGraph, profile: GpuProfile) -> Residency:
    live = register_bytes(bg)
    registers = BASE_REGISTERS + -(-live // (THREADS * F32))
    used = min(registers, MAX_REGISTERS)
    spill = max(0, registers - MAX_REGISTERS) * F32 * THREADS
    smem = sum(
        _elements(bg.tensors[b.outputs[0]].shape) * bg.tensors[b.outputs[0]].dtype.itemsize
        for b in bg.ops
        if b.kind is OpKind.INPUT
    ) * (NUM_STAGES - 1)
    by_regs = REGISTERS_PER_SM // (THREADS * used)
    by_smem = SMEM_PER_SM // smem if smem else MAX_BLOCKS_PER_SM
    blocks = max(1, min(MAX_BLOCKS_PER_SM, by_regs, by_smem))
    return Residency(registers, spill, MAX_REGISTERS * F32 * THREADS, smem, blocks)
