"""One test per validity rule of the IR, each triggered through the public builder API.

Every negative test checks the exact error class and that the message names the op and the
shapes involved.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import cast

import numpy as np
import pytest

from mugraph.ir import (
    AccumulationError,
    BlockGraph,
    BlockOutputLimitError,
    DeviceMemoryError,
    DType,
    DTypeError,
    GraphStructureError,
    IRError,
    KernelGraph,
    Limits,
    MappingError,
    OpKind,
    RankError,
    ShapeError,
    SharedMemoryError,
    Tensor,
    shapes,
)
from mugraph.ir.types import ACCUMULATORS, AccumKind
from mugraph.programs import builtin_programs
from mugraph.programs.benchmarks import gqa_expert

NONE = (-1, -1, -1)
SMEM_LIMIT = 96 * 1024


def pat(*parts: str) -> str:
    """A regex matching the literal parts in this order (anything between them)."""
    return ".*".join(re.escape(p) for p in parts)


def kernel(*shapes: Sequence[int], dtype: DType = DType.FLOAT16) -> tuple[KernelGraph, list[Tensor]]:
    g = KernelGraph()
    return g, [g.new_input(s, dtype) for s in shapes]


def block_with_input(
    shape: Sequence[int] = (4, 8), grid: Sequence[int] = (4, 1, 1), forloop: int = 1, fmap: int = -1
) -> tuple[KernelGraph, Tensor, BlockGraph, Tensor]:
    """A kernel input of `shape` read by a block graph, split on dim 0 over grid axis x."""
    g = KernelGraph()
    d = g.new_input(shape)
    bg = BlockGraph(grid=grid, forloop=forloop)
    return g, d, bg, bg.new_input(d, (0, -1, -1), fmap=fmap)


# -- shapes of tensors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        pytest.param((1, 2, 3, 4, 5), "input X: shape [1,2,3,4,5] has 5 dims; 1 to 4 allowed", id="5-dims"),
        pytest.param((), "input X: shape [] has 0 dims; 1 to 4 allowed", id="0-dims"),
        pytest.param((2, 0), "input X: shape [2, 0] must hold positive integers", id="zero-dim"),
        pytest.param((2, -3, 4), "input X: shape [2, -3, 4] must hold positive integers", id="negative-dim"),
    ],
)
def test_rank_rules(shape: tuple[int, ...], expected: str) -> None:
    g = KernelGraph()
    with pytest.raises(RankError, match=pat(expected)):
        g.new_input(shape, name="X")
    assert g.tensors == [] and g.dmem_bytes == 0


@pytest.mark.parametrize("kind", ["add", "mul", "div"])
def test_elementwise_broadcast_failure(kind: str) -> None:
    g, (a, b) = kernel((4, 8), (4, 3))
    with pytest.raises(ShapeError, match=pat(f"{kind}: operands [4,8] and [4,3] do not broadcast in dim 1")):
        getattr(g, kind)(a, b)


def test_elementwise_rank_mismatch() -> None:
    g, (a, b) = kernel((4, 8), (8,))
    with pytest.raises(ShapeError, match=pat("add: operands [4,8] and [8] have different ranks")):
        g.add(a, b)


def test_elementwise_broadcast_failure_in_block_graph() -> None:
    g, _, bg, x = block_with_input((4, 8))  # tile [1,8]
    z = bg.new_input(g.new_input((4, 3)), (0, -1, -1))  # tile [1,3]
    with pytest.raises(ShapeError, match=pat("mul: operands [1,8] and [1,3] do not broadcast in dim 1")):
        bg.mul(x, z)


def test_matmul_inner_dim_mismatch() -> None:
    g, (a, b) = kernel((4, 8), (16, 2))
    with pytest.raises(ShapeError, match=pat("matmul: A [4,8] has 8 columns but B [16,2] has 16 rows")):
        g.matmul(a, b)


def test_matmul_batch_dim_mismatch() -> None:
    g, (a, b) = kernel((2, 4, 8), (3, 8, 5))
    with pytest.raises(ShapeError, match=pat("matmul: batch dims of [2,4,8] and [3,8,5] differ")):
        g.matmul(a, b)


@pytest.mark.parametrize(
    ("sa", "sb", "shown"),
    [
        pytest.param((8,), (8,), "[8] and [8]", id="rank-1"),
        pytest.param((4, 8), (2, 8, 4), "[4,8] and [2,8,4]", id="rank-mismatch"),
    ],
)
def test_matmul_rank(sa: tuple[int, ...], sb: tuple[int, ...], shown: str) -> None:
    g, (a, b) = kernel(sa, sb)
    with pytest.raises(ShapeError, match=pat(f"matmul: operands {shown} need equal ranks of at least 2")):
        g.matmul(a, b)


@pytest.mark.parametrize("dim", [2, -1, 7])
def test_reduction_dim_out_of_range(dim: int) -> None:
    g, (a,) = kernel((4, 8))
    with pytest.raises(ShapeError, match=pat(f"reduction: dim {dim} is out of range for [4,8]")):
        g.reduction(a, dim)


@pytest.mark.parametrize("kind", ["reduction", "concat"])
def test_bool_dim_is_rejected(kind: str) -> None:
    g, (a, b) = kernel((4, 8), (4, 8))
    with pytest.raises(ShapeError, match=pat(kind, "dim True", "[4,8]")):
        g.reduction(a, True) if kind == "reduction" else g.concat(a, b, True)


@pytest.mark.parametrize(
    ("sa", "sb", "dim", "expected"),
    [
        pytest.param((4, 8), (5, 8), 1, "concat on dim 1: [4,8] and [5,8] differ in dim 0", id="other-dim"),
        pytest.param((4, 8), (4, 8, 1), 0, "concat: operands [4,8] and [4,8,1] have different ranks", id="ranks"),
        pytest.param((4, 8), (4, 8), 2, "concat: dim 2 is out of range for [4,8]", id="dim-range"),
    ],
)
def test_concat_mismatch(sa: tuple[int, ...], sb: tuple[int, ...], dim: int, expected: str) -> None:
    g, (a, b) = kernel(sa, sb)
    with pytest.raises(ShapeError, match=pat(expected)):
        g.concat(a, b, dim)


# -- dtypes and graph ownership --------------------------------------------------------------------


def test_dtype_mismatch() -> None:
    g = KernelGraph()
    a = g.new_input((4, 8), DType.FLOAT16)
    b = g.new_input((4, 8), DType.FLOAT32)
    with pytest.raises(DTypeError, match=pat("add: operands [4,8] float16, [4,8] float32 have different dtypes")):
        g.add(a, b)


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("bf16", "(for 'bf16', write 'bfloat16')"),
        ("FP16", "(for 'FP16', write 'float16')"),
        ("torch.float", "(for 'torch.float', write 'float32')"),
        ("int8", "float16, bfloat16, float32"),
        ("Float16", "(for 'Float16', write 'float16')"),
    ],
)
def test_an_unknown_input_dtype_names_the_three_and_the_one_meant(given: str, words: str) -> None:
    g = KernelGraph()
    with pytest.raises(DTypeError, match=pat(f"input 'X': dtype {given!r} is not one of", words)):
        g.new_input((4, 8), given, name="X")
    assert g.new_input((4, 8), "bfloat16", name="X").dtype is DType.BFLOAT16


def test_a_numpy_dtype_class_is_named_by_its_module() -> None:
    with pytest.raises(DTypeError, match=pat("dtype 'numpy.float16' is not one of", "write 'float16'")):
        KernelGraph().new_input((4, 8), np.float16, name="X")  # type: ignore[arg-type]  # a user mistake


def test_dtype_mismatch_message_names_shapes() -> None:
    g = KernelGraph()
    a = g.new_input((4, 8), DType.FLOAT16)
    b = g.new_input((4, 1), DType.FLOAT32)
    with pytest.raises(DTypeError, match=pat("add", "[4,8]", "[4,1]")):
        g.add(a, b)


def test_dtype_mismatch_in_block_graph() -> None:
    g = KernelGraph()
    a = g.new_input((4, 8), DType.BFLOAT16)
    b = g.new_input((4, 8), DType.FLOAT32)
    bg = BlockGraph(grid=(4, 1, 1))
    x, y = bg.new_input(a, (0, -1, -1)), bg.new_input(b, (0, -1, -1))
    with pytest.raises(DTypeError, match=pat("matmul: operands [1,8] bfloat16, [1,8] float32 have different dtypes")):
        bg.matmul(x, y)


def test_tensor_from_another_kernel_graph() -> None:
    g, (a,) = kernel((4, 8))
    _, (b,) = kernel((4, 1))
    with pytest.raises(
        GraphStructureError, match=pat("add: operand [4,1] belongs to another graph than this kernel graph")
    ):
        g.add(a, b)


def test_device_tensor_used_in_block_graph() -> None:
    _, d, bg, _ = block_with_input((4, 8))
    with pytest.raises(
        GraphStructureError, match=pat("exp: operand [4,8] belongs to another graph than this block graph")
    ):
        bg.exp(d)


def test_tensor_from_another_block_graph() -> None:
    _, _, bg1, x1 = block_with_input((4, 8))
    x2 = block_with_input((4, 16))[3]
    with pytest.raises(
        GraphStructureError,
        match=pat("matmul: operand [1,16] belongs to another graph than this block graph"),
    ):
        bg1.matmul(x1, x2)


def test_customized_with_block_inputs_from_another_kernel_graph() -> None:
    g1, _ = kernel((4, 8))
    _, (a2,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 1, 1))
    bg.new_output(bg.accum_no_red(bg.new_input(a2, (0, -1, -1))), (0, -1, -1))
    with pytest.raises(
        GraphStructureError,
        match=pat("customized: operand [4,8] belongs to another graph than this kernel graph"),
    ):
        g1.customized(bg)


def test_customized_inputs_argument_from_another_kernel_graph() -> None:
    g1, (a1,) = kernel((4, 8))
    _, (a2,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 1, 1))
    bg.new_output(bg.accum_no_red(bg.new_input(a1, (0, -1, -1))), (0, -1, -1))
    with pytest.raises(GraphStructureError, match=pat("customized", "[4,8]", "another graph")):
        g1.customized(bg, [a2])


# -- block-graph mappings ---------------------------------------------------------------------------


def test_imap_dim_out_of_range() -> None:
    _, (a,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 1, 1))
    with pytest.raises(MappingError, match=pat("imap [2, -1, -1]: grid axis x maps dim 2, [4,8]")):
        bg.new_input(a, (2, -1, -1))
    assert bg.tensors == [] and bg.sources == [] and bg.smem_bytes == 0


def test_imap_two_axes_same_dim() -> None:
    _, (a,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 2, 1))
    with pytest.raises(MappingError, match=pat("imap [0, 0, -1]: grid axes x and y both map dim 0 of [4,8]")):
        bg.new_input(a, (0, 0, -1))


def test_imap_on_grid_axis_of_size_1() -> None:
    _, (a,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 1, 1))
    with pytest.raises(
        MappingError, match=pat("imap [-1, 1, -1] of [4,8]: grid axis y has size 1 and must map -1 (grid [4, 1, 1])")
    ):
        bg.new_input(a, (-1, 1, -1))


def test_imap_on_grid_axis_of_size_1_names_tensor_shape() -> None:
    _, (a,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 1, 1))
    with pytest.raises(MappingError, match=pat("imap", "[4,8]")):
        bg.new_input(a, (-1, 1, -1))


def test_imap_divisibility() -> None:
    _, (a,) = kernel((4, 8))
    bg = BlockGraph(grid=(3, 1, 1))
    with pytest.raises(
        MappingError,
        match=pat("input [4,8] imap [0, -1, -1]: dim 0 (4) is not divisible by grid axis x (3)"),
    ):
        bg.new_input(a, (0, -1, -1))


@pytest.mark.parametrize("fmap", [2, -2])
def test_fmap_out_of_range(fmap: int) -> None:
    _, (a,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 1, 1), forloop=2)
    with pytest.raises(MappingError, match=pat(f"input [4,8]: fmap {fmap} is out of range")):
        bg.new_input(a, (0, -1, -1), fmap=fmap)


def test_fmap_with_forloop_1() -> None:
    _, (a,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 1, 1), forloop=1)
    with pytest.raises(MappingError, match=pat("input [4,8]: fmap 1 with for-loop range 1; use fmap -1")):
        bg.new_input(a, (0, -1, -1), fmap=1)


def test_fmap_divisibility() -> None:
    _, (a,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 1, 1), forloop=3)
    with pytest.raises(
        MappingError,
        match=pat("input [4,8] fmap 1: per-block dim 1 (8) is not divisible by the for-loop range 3"),
    ):
        bg.new_input(a, (0, -1, -1), fmap=1)


def test_omap_leaves_grid_axis_unmapped() -> None:
    _, _, bg, x = block_with_input((4, 8))
    acc = bg.accum_no_red(x)
    with pytest.raises(MappingError, match=pat("omap [-1, -1, -1]: grid axis x has 4 blocks but maps no dim of [1,8]")):
        bg.new_output(acc, NONE)
    assert bg.output_shapes == []


def test_omap_dim_out_of_range() -> None:
    _, _, bg, x = block_with_input((4, 8))
    with pytest.raises(MappingError, match=pat("omap [2, -1, -1]: grid axis x maps dim 2, [1,8]")):
        bg.new_output(bg.accum_no_red(x), (2, -1, -1))


def test_omap_on_grid_axis_of_size_1() -> None:
    _, _, bg, x = block_with_input((4, 8))
    with pytest.raises(
        MappingError, match=pat("omap [0, 1, -1] of [1,8]: grid axis y has size 1 and must map -1 (grid [4, 1, 1])")
    ):
        bg.new_output(bg.accum_no_red(x), (0, 1, -1))


def test_omap_on_grid_axis_of_size_1_names_tensor_shape() -> None:
    _, _, bg, x = block_with_input((4, 8))
    with pytest.raises(MappingError, match=pat("omap", "[1,8]")):
        bg.new_output(bg.accum_no_red(x), (0, 1, -1))


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"grid": (0, 1, 1)}, "grid [0, 1, 1] must be three positive integers", id="grid-0"),
        pytest.param({"grid": (4, 1)}, "grid [4, 1] must be three positive integers", id="grid-2d"),
        pytest.param({"grid": (4, 1, 1), "block": (0, 1, 1)}, "block dims [0, 1, 1] must be three", id="block"),
        pytest.param({"grid": (4, 1, 1), "forloop": 0}, "for-loop range 0 must be a positive integer", id="forloop-0"),
        pytest.param({"grid": (4, 1, 1), "rdx": 0}, "reduction_dimx 0 must be a positive integer", id="rdx-0"),
    ],
)
def test_block_graph_parameters(kwargs: dict[str, object], expected: str) -> None:
    with pytest.raises(MappingError, match=pat(expected)):
        BlockGraph(**kwargs)  # type: ignore[arg-type]


def test_grid_with_more_than_1024_blocks() -> None:
    assert BlockGraph(grid=(32, 32, 1)).grid == (32, 32, 1)  # exactly the limit is fine
    with pytest.raises(MappingError, match=pat("grid [64, 32, 1] has 2048 blocks; at most 1024 allowed")):
        BlockGraph(grid=(64, 32, 1))
    with pytest.raises(MappingError, match=pat("grid [8, 1, 1] has 8 blocks; at most 4 allowed")):
        BlockGraph(grid=(8, 1, 1), limits=Limits(max_blocks=4))


# -- accumulation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["add", "mul", "div", "matmul"])
def test_binary_op_mixing_before_and_after_accumulation(kind: str) -> None:
    g = KernelGraph()
    bg = BlockGraph(grid=(4, 1, 1))
    x = bg.new_input(g.new_input((4, 8)), (0, -1, -1))  # [1,8]
    y = bg.new_input(g.new_input((32, 8)), (0, -1, -1))  # [8,8]
    acc = bg.accum_no_red(y)  # [8,8]: shapes fit every op, only the accumulation rule fails
    before_after = "[1,8] (before accumulation), [8,8] (after accumulation)"
    with pytest.raises(AccumulationError, match=pat(f"{kind}: operands {before_after} mix the loop body")):
        getattr(bg, kind)(x, acc)


def test_concat_mixing_before_and_after_accumulation() -> None:
    _, _, bg, x = block_with_input((4, 8))
    acc = bg.accum_no_red(x)
    with pytest.raises(
        AccumulationError,
        match=pat("concat: operands [1,8] (after accumulation), [1,8] (before accumulation) mix"),
    ):
        bg.concat(acc, x, 1)


@pytest.mark.parametrize("kind", sorted(k.value for k in OpKind if k.value.startswith("accum_")))
def test_accumulating_an_accumulated_tensor(kind: str) -> None:
    _, _, bg, x = block_with_input((4, 64))
    acc = bg.accum_no_red(x)  # [1,64]
    with pytest.raises(AccumulationError, match=pat(f"{kind}: input [1,64] is already accumulated")):
        bg.forloop_accum(acc, kind)


def test_forloop_accum_with_a_non_accumulator_kind() -> None:
    _, _, bg, x = block_with_input((4, 8))
    with pytest.raises(GraphStructureError, match=pat("exp is not a for-loop accumulator")):
        bg.forloop_accum(x, OpKind.EXP)


def test_output_of_non_accumulated_tensor() -> None:
    _, _, bg, x = block_with_input((4, 8))
    with pytest.raises(AccumulationError, match=pat("output: [1,8] is not accumulated")):
        bg.new_output(bg.exp(x), (0, -1, -1))


def test_redtox_last_dim_not_multiple_of_rdx() -> None:
    _, _, bg, x = block_with_input((4, 48))  # [1,48], default rdx 64
    with pytest.raises(
        ShapeError, match=pat("accum_redtox: last dim of [1,48] is not a multiple of reduction_dimx 64")
    ):
        bg.accum_redtox(x)
    g = KernelGraph()
    bg16 = BlockGraph(grid=(4, 1, 1), rdx=16)
    assert bg16.accum_redtox(bg16.new_input(g.new_input((4, 48)), (0, -1, -1))).shape == (1, 16)


# -- limits ------------------------------------------------------------------------------------------


def test_third_block_output() -> None:
    _, _, bg, x = block_with_input((4, 8))
    acc = bg.accum_no_red(x)
    bg.new_output(acc, (0, -1, -1))
    bg.new_output(acc, (0, -1, -1))
    with pytest.raises(BlockOutputLimitError, match=pat("output [1,8]: a block graph has at most 2 outputs")):
        bg.new_output(acc, (0, -1, -1))
    assert bg.output_shapes == [(4, 8), (4, 8)]


def test_block_output_limit_is_configurable() -> None:
    g = KernelGraph()
    bg = BlockGraph(grid=(4, 1, 1), limits=Limits(max_block_outputs=1))
    acc = bg.accum_sum(bg.new_input(g.new_input((4, 8)), (0, -1, -1)))
    bg.new_output(acc, (0, -1, -1))
    with pytest.raises(BlockOutputLimitError, match=pat("output [1,1]: a block graph has at most 1 outputs")):
        bg.new_output(acc, (0, -1, -1))


def test_shared_memory_over_96_kib() -> None:
    g = KernelGraph()
    bg = BlockGraph(grid=(2, 1, 1))
    with pytest.raises(
        SharedMemoryError,
        match=pat("input [64,1024]: shared memory would reach 131072 bytes, over the limit of 98304"),
    ):
        bg.new_input(g.new_input((128, 1024)), (0, -1, -1))
    assert bg.smem_bytes == 0 and bg.tensors == []


def test_rejected_block_input_leaves_no_source() -> None:
    g = KernelGraph()
    small, big = g.new_input((2, 8)), g.new_input((128, 1024))
    bg = BlockGraph(grid=(2, 1, 1))
    with pytest.raises(SharedMemoryError):
        bg.new_input(big, (0, -1, -1))
    bg.new_output(bg.accum_no_red(bg.new_input(small, (0, -1, -1))), (0, -1, -1))
    assert [t.shape for t in bg.sources] == [(2, 8)]


def test_shared_memory_limit_boundary_and_in_place_ops() -> None:
    g = KernelGraph()
    bg = BlockGraph(grid=(2, 1, 1))
    x = bg.new_input(g.new_input((96, 1024)), (0, -1, -1))  # [48,1024] fp16: exactly 96 KiB
    assert bg.smem_bytes == SMEM_LIMIT
    y = bg.mul_scalar(bg.clamp(bg.relu(bg.exp(x)), -1.0, 1.0), 0.5)  # in place: no new bytes
    acc = bg.accum_no_red(y)  # in place too
    assert bg.smem_bytes == SMEM_LIMIT
    with pytest.raises(
        SharedMemoryError,
        match=pat("reduction [48,1]: shared memory would reach 98400 bytes, over the limit of 98304"),
    ):
        bg.reduction(acc, 1)
    assert bg.smem_bytes == SMEM_LIMIT
    with pytest.raises(SharedMemoryError, match=pat("accum_sum [48,1]: shared memory would reach 98400")):
        bg.accum_sum(y)


def test_shared_memory_accounting_exact_bytes() -> None:
    g = KernelGraph()
    a = g.new_input((16, 64))
    w = g.new_input((64, 32), DType.FLOAT16)
    bg = BlockGraph(grid=(4, 1, 1), forloop=2)
    x = bg.new_input(a, (0, -1, -1), fmap=1)  # [4,32] fp16 = 256 bytes
    assert x.shape == (4, 32) and bg.smem_bytes == 256
    wt = bg.new_input(w, NONE, fmap=0)  # [32,32] fp16 = 2048 bytes
    assert wt.shape == (32, 32) and bg.smem_bytes == 2304
    e = bg.silu(bg.exp(x))  # unary ops are in place
    assert bg.smem_bytes == 2304
    m = bg.matmul(e, wt)  # [4,32] = 256 bytes
    assert m.shape == (4, 32) and bg.smem_bytes == 2560
    acc = bg.accum_no_red(m)  # in place
    assert acc.shape == (4, 32) and bg.smem_bytes == 2560
    s = bg.accum_sum(x)  # [4,1] = 8 bytes
    assert s.shape == (4, 1) and bg.smem_bytes == 2568
    d = bg.div(acc, s)  # binary ops allocate: [4,32] = 256 bytes
    assert d.shape == (4, 32) and bg.smem_bytes == 2824
    bg.new_output(d, (0, -1, -1))  # outputs allocate nothing
    assert bg.smem_bytes == 2824
    assert bg.output_shapes == [(16, 32)]
    out = g.customized(bg)
    assert [t.shape for t in out] == [(16, 32)]


def test_shared_memory_counts_float32_as_4_bytes() -> None:
    g = KernelGraph()
    bg = BlockGraph(grid=(1, 1, 1), limits=Limits(smem_bytes=100))
    x = bg.new_input(g.new_input((5, 5), DType.FLOAT32), NONE)
    assert bg.smem_bytes == 100
    bg.square(x)
    with pytest.raises(SharedMemoryError, match=pat("rms_norm [5,5]: shared memory would reach 200 bytes")):
        bg.rms_norm(x)


def test_device_memory_over_the_limit() -> None:
    g = KernelGraph(Limits(dmem_bytes=1024))
    a = g.new_input((16, 16))  # 512 bytes
    b = g.new_input((16, 16))  # 1024: exactly the limit
    assert g.dmem_bytes == 1024
    with pytest.raises(
        DeviceMemoryError,
        match=pat("add [16,16]: device memory would reach 1536 bytes, over the limit of 1024"),
    ):
        g.add(a, b)
    with pytest.raises(DeviceMemoryError, match=pat("input [2,2]: device memory would reach 1032 bytes")):
        g.new_input((2, 2))
    assert g.dmem_bytes == 1024 and len(g.tensors) == 2 and len(g.ops) == 2


def test_device_memory_counts_customized_outputs() -> None:
    g = KernelGraph(Limits(dmem_bytes=100))
    a = g.new_input((4, 8))  # 64 bytes
    bg = BlockGraph(grid=(4, 1, 1))
    bg.new_output(bg.accum_no_red(bg.new_input(a, (0, -1, -1))), (0, -1, -1))
    with pytest.raises(DeviceMemoryError, match=pat("customized [4,8]: device memory would reach 128 bytes")):
        g.customized(bg)


# -- graph-defined ops -----------------------------------------------------------------------------


def _two_input_block() -> tuple[KernelGraph, Tensor, Tensor, BlockGraph]:
    g, (a, b) = kernel((4, 8), (4, 8))
    bg = BlockGraph(grid=(4, 1, 1))
    x, y = bg.new_input(a, (0, -1, -1)), bg.new_input(b, (0, -1, -1))
    bg.new_output(bg.accum_no_red(bg.add(x, y)), (0, -1, -1))
    return g, a, b, bg


def test_customized_with_no_outputs() -> None:
    g, (a,) = kernel((4, 8))
    bg = BlockGraph(grid=(4, 1, 1))
    bg.accum_no_red(bg.new_input(a, (0, -1, -1)))
    with pytest.raises(GraphStructureError, match=pat("customized: the block graph has no outputs")):
        g.customized(bg)
    assert len(g.ops) == 1


def test_customized_inputs_in_wrong_order() -> None:
    g, a, b, bg = _two_input_block()
    with pytest.raises(
        GraphStructureError,
        match=pat(
            "customized: inputs ([4,8], [4,8]) must be the block graph's input tensors ([4,8], [4,8])",
            "in the order of its new_input calls",
        ),
    ):
        g.customized(bg, [b, a])
    with pytest.raises(GraphStructureError, match=pat("customized: inputs ([4,8]) must be")):
        g.customized(bg, [a])
    assert [t.shape for t in g.customized(bg, [a, b])] == [(4, 8)]


def test_customized_inputs_in_wrong_order_names_shapes() -> None:
    g, (a, b) = kernel((4, 8), (4, 1))
    bg = BlockGraph(grid=(4, 1, 1))
    x, y = bg.new_input(a, (0, -1, -1)), bg.new_input(b, (0, -1, -1))
    bg.new_output(bg.accum_no_red(bg.add(x, y)), (0, -1, -1))
    with pytest.raises(GraphStructureError, match=pat("customized", "[4,1]", "[4,8]")):
        g.customized(bg, [b, a])


def test_customized_reusing_a_closed_block_graph() -> None:
    g, a, _, bg = _two_input_block()
    g.customized(bg)
    with pytest.raises(GraphStructureError, match=pat("customized: this block graph is already used by")):
        g.customized(bg)
    with pytest.raises(GraphStructureError, match=pat("exp: this block graph is closed")):
        bg.exp(bg.tensors[0])
    with pytest.raises(GraphStructureError, match=pat("input: this block graph is closed")):
        bg.new_input(a, (0, -1, -1))
    with pytest.raises(GraphStructureError, match=pat("output: this block graph is closed")):
        bg.new_output(bg.tensors[-1], (0, -1, -1))


def test_customized_rejects_a_non_block_graph() -> None:
    g, _ = kernel((4, 8))
    with pytest.raises(GraphStructureError, match=pat("customized:", "is not a block graph")):
        g.customized(KernelGraph())  # type: ignore[arg-type]


# -- attributes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lo", "hi"), [(1.0, 0.0), (0.5, 0.5)])
def test_clamp_lo_not_below_hi(lo: float, hi: float) -> None:
    g, (a,) = kernel((4, 8))
    expected = f"clamp [4,8]: lower bound {lo!r} must be a finite number below upper bound {hi!r}"
    with pytest.raises(GraphStructureError, match=pat(expected)):
        g.clamp(a, lo, hi)


def test_clamp_lo_not_below_hi_names_shape() -> None:
    g, (a,) = kernel((4, 8))
    with pytest.raises(GraphStructureError, match=pat("clamp", "[4,8]")):
        g.clamp(a, 1.0, 0.0)


def test_mul_scalar_nan() -> None:
    g, (a,) = kernel((4, 8))
    with pytest.raises(GraphStructureError, match=pat("mul_scalar [4,8]: scalar nan must be a finite number")):
        g.mul_scalar(a, float("nan"))


@pytest.mark.parametrize("scalar", [float("inf"), float("-inf")])
def test_mul_scalar_infinite(scalar: float) -> None:
    g, (a,) = kernel((4, 8))
    with pytest.raises(GraphStructureError, match=pat("mul_scalar", "must be a finite number")):
        g.mul_scalar(a, scalar)


# -- valid graphs ------------------------------------------------------------------------------------


def test_valid_kernel_graph_shapes() -> None:
    g = KernelGraph()
    q = g.new_input((2, 3, 4, 5), name="Q")  # four dims are allowed
    k = g.new_input((2, 3, 5, 6), name="K")
    bias = g.new_input((1, 3, 1, 6), DType.FLOAT16, name="bias")
    s = g.matmul(q, k)
    assert s.shape == (2, 3, 4, 6)
    t = g.add(s, bias)  # broadcasting
    assert t.shape == (2, 3, 4, 6)
    r = g.reduction(g.exp(t), 3)
    assert r.shape == (2, 3, 4, 1)
    c = g.concat(t, r, 3)
    assert c.shape == (2, 3, 4, 7)
    assert g.rms_norm(c).shape == (2, 3, 4, 7)
    assert g.clamp(c, -1.0, 1.0).shape == (2, 3, 4, 7)
    g.mark_output(c, "C")
    assert [t.shape for t in g.output_tensors] == [(2, 3, 4, 7)]
    assert [name for name, _, _ in g.input_signature()] == ["Q", "K", "bias"]
    n_elems = 120 + 180 + 18 + 144 + 144 + 144 + 24 + 168 + 168 + 168
    assert g.dmem_bytes == 2 * n_elems


def test_valid_block_graph_shapes() -> None:
    g = KernelGraph()
    x_d = g.new_input((8, 4096), name="X")
    w_d = g.new_input((4096, 4096), name="W")
    bg = BlockGraph(grid=(64, 1, 1), forloop=32)
    x = bg.new_input(x_d, NONE, fmap=1)
    w = bg.new_input(w_d, (1, -1, -1), fmap=0)
    assert (x.shape, w.shape) == ((8, 128), (128, 64))
    acc = bg.accum_no_red(bg.matmul(x, w))
    assert acc.shape == (8, 64) and acc.after_accum
    bg.new_output(bg.silu(acc), (1, -1, -1))
    (o,) = g.customized(bg, [x_d, w_d])
    assert o.shape == (8, 4096)
    assert bg.smem_bytes == 2 * (8 * 128 + 128 * 64 + 8 * 64)


def test_gqa_expert_shapes() -> None:
    g = gqa_expert()
    k1, k2 = g.ops_of(OpKind.CUSTOMIZED)
    assert [g.tensor(i).shape for i in k1.outputs] == [(2, 256, 1024), (2, 256, 16)]
    assert [g.tensor(i).shape for i in k2.outputs] == [(2, 256, 64)]
    assert k1.block is not None and k1.block.grid == (2, 16, 4) and k1.block.forloop == 4
    assert [t.shape for t in k1.block.input_tensors] == [(1, 64, 64)] * 3
    assert k1.block.smem_bytes <= SMEM_LIMIT
    assert [t.shape for t in g.output_tensors] == [(2, 256, 64)]


@pytest.mark.parametrize("name", sorted(builtin_programs()))
def test_builtin_experts_match_reference_signatures(name: str) -> None:
    prog = builtin_programs()[name]
    ref = prog.reference()
    for build in prog.experts.values():
        expert = build()
        assert expert.input_signature() == ref.input_signature()
        assert [t.shape for t in expert.output_tensors] == [t.shape for t in ref.output_tensors]


def test_every_rule_error_is_an_ir_error() -> None:
    errors: list[Callable[[], object]] = [
        lambda: KernelGraph().new_input(()),
        lambda: BlockGraph(grid=(2048, 1, 1)),
    ]
    for f in errors:
        with pytest.raises(IRError):
            f()
    assert issubclass(DeviceMemoryError, ValueError)


@pytest.mark.parametrize("kind", sorted(set(OpKind) - ACCUMULATORS))
def test_accumulator_shape_refuses_every_other_kind(kind: OpKind) -> None:
    """Only an accumulator kind type-checks; another one cast past the checker still fails loudly."""
    with pytest.raises(AssertionError, match="unreachable"):
        shapes.accumulator(cast(AccumKind, kind), (8, 64), 16)
