"""Registers, shared memory and resident programs per SM of an emitted kernel, on Mirage's rms_norm
expert (worked by hand) and on kernels whose shapes push each limit."""

from __future__ import annotations

import json
from pathlib import Path

from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.serialize import loads
from mugraph.ir.tiles import THREADS
from mugraph.programs.benchmarks import gqa_expert, rms_norm_expert
from mugraph.stages.layout.emitted import estimate_emitted
from mugraph.stages.layout.profiles import get_profile
from mugraph.stages.layout.residency import BASE_REGISTERS, MAX_REGISTERS, register_bytes, residency

H100 = get_profile("H100")
GRAPHS = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "gpu_kernels_h100_graphs.jsonl"
RANK_TEN = "5ebfccce7dd2"


def _block(g: KernelGraph) -> BlockGraph:
    bg = next(op.block for op in g.ops if op.block is not None)
    assert bg is not None
    return bg


def test_rms_norm_expert_worked_by_hand() -> None:
    """Tiles X 16x64 and W 64x96 (padded to 64x128), fp16 as loaded; the matmul's 16x96 result
    (padded 16x128) in float32 while X and W are still live; the accumulators' running tiles (the
    matmul's 16x128 and accum_rms's input 16x64, float32) for the whole loop."""
    bg = _block(rms_norm_expert())
    live = (16 * 64 * 2 + 64 * 128 * 2 + 16 * 128 * 4) + (16 * 128 * 4 + 16 * 64 * 4)
    assert register_bytes(bg) == live == 38912
    res = residency(bg, H100)
    assert res.registers == BASE_REGISTERS + live // (THREADS * 4) and res.spill_bytes == 0
    # two pipeline stages of both input tiles in shared memory; the register file allows 4 programs
    assert res.smem_bytes == 2 * (16 * 64 + 64 * 128) * 2 and res.blocks_per_sm == 4


def test_a_working_set_above_255_registers_spills() -> None:
    """rms_norm's measured rank 10 (slowest of the ten): X 16x1024 and W 1024x24 (padded 1024x32) as
    loaded, the matmul's 16x32 result, and the accumulators' 16x1024 squares and 16x32 sum: 164 KiB per
    program, 360 registers per thread where 255 fit."""
    rec = next(json.loads(line) for line in GRAPHS.read_text().splitlines() if RANK_TEN in line)
    bg = _block(loads(rec["graph"]))
    live = (16 * 1024 * 2 + 1024 * 32 * 2 + 16 * 32 * 4) + (16 * 1024 * 4 + 16 * 32 * 4)
    assert register_bytes(bg) == live
    res = residency(bg, H100)
    assert res.registers == BASE_REGISTERS + live // (THREADS * 4) == 360
    assert res.spill_bytes == (360 - MAX_REGISTERS) * 4 * THREADS
    assert res.blocks_per_sm == 1  # two pipelined stages of 96 KiB of tiles


def test_resident_programs_share_an_sm() -> None:
    """gqa's expert runs 128 programs, one per SM: resident programs only matter past 132."""
    est = estimate_emitted(gqa_expert(), H100)
    first = est.kernels[0]
    assert first.blocks <= H100.sms and first.waves == 1
    assert est.terms()["spill_bytes"] == 0 and est.terms()["model"] == "emitted-v2"
