"""float32 programs are priced with 4-byte elements everywhere and float32 matmuls on CUDA cores."""

from __future__ import annotations

from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.types import DType
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.emitted import estimate_emitted
from mugraph.stages.layout.facts import gather
from mugraph.stages.layout.profiles import get_profile
from mugraph.stages.layout.roofline import estimate

PROFILE = get_profile("h100")


def kernel_program(dtype: DType) -> KernelGraph:
    g = KernelGraph()
    x, w = g.new_input((1024, 4096), dtype, name="X"), g.new_input((4096, 4096), dtype, name="W")
    g.mark_output(g.matmul(g.layer_norm(x, eps=1e-5), w), "O")
    return g


def block_program(dtype: DType) -> KernelGraph:
    g = KernelGraph()
    x_d, w_d = g.new_input((16, 1024), dtype, name="X"), g.new_input((1024, 1024), dtype, name="W")
    b = BlockGraph(grid=(16, 1, 1), forloop=16)
    x = b.new_input(x_d, (-1, -1, -1), fmap=1)
    w = b.new_input(w_d, (1, -1, -1), fmap=0)
    b.new_output(b.div(b.accum_no_red(b.matmul(x, w)), b.accum_rms(x, eps=1e-6)), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def test_every_tensor_is_priced_at_its_itemsize() -> None:
    for build in (kernel_program, block_program):
        half, full = build(DType.FLOAT16), build(DType.FLOAT32)
        assert set(gather(full).itemsize.values()) == {4} and set(gather(half).itemsize.values()) == {2}
        r16 = estimate(half, choose_layouts(half).layouts, PROFILE, gather(half))
        r32 = estimate(full, choose_layouts(full).layouts, PROFILE, gather(full))
        for k16, k32 in zip(r16.kernels, r32.kernels, strict=True):
            assert k32.dram_bytes == 2 * k16.dram_bytes


def test_float32_matmuls_are_slower_than_fp16_ones() -> None:
    """Full float32 products on CUDA cores (codegen's default) against fp16 on tensor cores: a
    matmul-bound kernel costs more than the twice its bytes alone would."""
    half, full = kernel_program(DType.FLOAT16), kernel_program(DType.FLOAT32)
    e16, e32 = estimate_emitted(half, PROFILE), estimate_emitted(full, PROFILE)
    mm16, mm32 = (next(k for k in e.kernels if k.kind == "matmul") for e in (e16, e32))
    assert mm32.seconds > 2 * mm16.seconds
    r16 = estimate(half, choose_layouts(half).layouts, PROFILE, gather(half))
    r32 = estimate(full, choose_layouts(full).layouts, PROFILE, gather(full))
    m16, m32 = (next(k for k in r.kernels if k.kind == "matmul") for r in (r16, r32))
    assert m16.tensor_flops > 0 and m32.tensor_flops == 0 and m32.simt_flops >= 2 * m16.tensor_flops
    assert (
        estimate_emitted(block_program(DType.FLOAT32), PROFILE).seconds
        > estimate_emitted(block_program(DType.FLOAT16), PROFILE).seconds
    )
