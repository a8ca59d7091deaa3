"""Shape rules of every op. Pure functions; errors name the op and the shapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from mugraph.ir.errors import MappingError, RankError, ShapeError
from mugraph.ir.types import MAX_DIMS, AccumKind, Dim3, OpKind, Shape

AXES = "xyz"


def fmt(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def check_shape(shape: Sequence[int], what: str) -> Shape:
    dims = tuple(shape)
    if not 1 <= len(dims) <= MAX_DIMS:
        raise RankError(f"{what}: shape {fmt(dims)} has {len(dims)} dims; 1 to {MAX_DIMS} allowed")
    if any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in dims):
        raise RankError(f"{what}: shape {list(dims)} must hold positive integers")
    return dims


def elementwise(op: OpKind, a: Shape, b: Shape) -> Shape:
    """Binary element-wise ops: equal rank, each dim equal or 1 on one side."""
    if len(a) != len(b):
        raise ShapeError(f"{op}: operands {fmt(a)} and {fmt(b)} have different ranks")
    out = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"{op}: operands {fmt(a)} and {fmt(b)} do not broadcast in dim {i}")
        out.append(max(x, y))
    return tuple(out)


def matmul(a: Shape, b: Shape) -> Shape:
    """A's last dim contracts with B's second-to-last; leading (batch) dims must be equal."""
    if len(a) != len(b) or len(a) < 2:
        raise ShapeError(f"matmul: operands {fmt(a)} and {fmt(b)} need equal ranks of at least 2")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul: A {fmt(a)} has {a[-1]} columns but B {fmt(b)} has {b[-2]} rows")
    if a[:-2] != b[:-2]:
        raise ShapeError(f"matmul: batch dims of {fmt(a)} and {fmt(b)} differ")
    return a[:-1] + (b[-1],)


def check_dim(op: OpKind, shape: Shape, dim: int) -> None:
    if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim < len(shape):
        raise ShapeError(f"{op}: dim {dim} is out of range for {fmt(shape)}")


def reduction(shape: Shape, dim: int) -> Shape:
    """Sum over one dim, which stays with size 1."""
    check_dim(OpKind.REDUCTION, shape, dim)
    return shape[:dim] + (1,) + shape[dim + 1 :]


def concat(a: Shape, b: Shape, dim: int) -> Shape:
    if len(a) != len(b):
        raise ShapeError(f"concat: operands {fmt(a)} and {fmt(b)} have different ranks")
    check_dim(OpKind.CONCAT, a, dim)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if i != dim and x != y:
            raise ShapeError(f"concat on dim {dim}: {fmt(a)} and {fmt(b)} differ in dim {i}")
    return a[:dim] + (a[dim] + b[dim],) + a[dim + 1 :]


def accumulator(op: AccumKind, shape: Shape, rdx: int) -> Shape:
    """Shape after the for-loop accumulation (LD = last dim)."""
    match op:
        case OpKind.ACCUM_NO_RED:
            return shape
        case OpKind.ACCUM_SUM | OpKind.ACCUM_MEAN | OpKind.ACCUM_RMS:
            return shape[:-1] + (1,)
        case OpKind.ACCUM_REDTOX:
            if shape[-1] % rdx:
                raise ShapeError(f"{op}: last dim of {fmt(shape)} is not a multiple of reduction_dimx {rdx}")
            return shape[:-1] + (rdx,)
        case _ as unreachable:
            assert_never(unreachable)


def check_dim3(values: Sequence[int], what: str) -> Dim3:
    t = tuple(values)
    if len(t) != 3 or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in t):
        raise MappingError(f"{what} {list(t)} must be three positive integers")
    return (t[0], t[1], t[2])


def _check_map(kind: str, mapping: Sequence[int], grid: Dim3, rank: int, shape: Shape) -> tuple[int, int, int]:
    m = tuple(mapping)
    if len(m) != 3 or any(not isinstance(v, int) or isinstance(v, bool) for v in m):
        raise MappingError(f"{kind} {list(m)} must be three integers")
    seen: dict[int, str] = {}
    for axis, d in zip(AXES, m, strict=True):
        if d == -1:
            continue
        if not 0 <= d < rank:
            raise MappingError(f"{kind} {list(m)}: grid axis {axis} maps dim {d}, {fmt(shape)} has {rank} dims")
        if d in seen:
            raise MappingError(f"{kind} {list(m)}: grid axes {seen[d]} and {axis} both map dim {d} of {fmt(shape)}")
        seen[d] = axis
    for axis, d, g in zip(AXES, m, grid, strict=True):
        if g == 1 and d != -1:
            raise MappingError(
                f"{kind} {list(m)} of {fmt(shape)}: grid axis {axis} has size 1 and must map -1 (grid {list(grid)})"
            )
    return (m[0], m[1], m[2])


def block_input_tile(
    shape: Shape, grid: Dim3, imap: Sequence[int], fmap: int, forloop: int
) -> tuple[tuple[int, int, int], Shape]:
    """Per-iteration tile of a device tensor read by one block (imap splits, then fmap)."""
    im = _check_map("imap", imap, grid, len(shape), shape)
    tile = list(shape)
    for axis, d, g in zip(AXES, im, grid, strict=True):
        if d >= 0:
            if tile[d] % g:
                raise MappingError(
                    f"input {fmt(shape)} imap {list(im)}: dim {d} ({tile[d]}) is not divisible "
                    f"by grid axis {axis} ({g})"
                )
            tile[d] //= g
    if not isinstance(fmap, int) or isinstance(fmap, bool) or not -1 <= fmap < len(shape):
        raise MappingError(f"input {fmt(shape)}: fmap {fmap} is out of range")
    if fmap >= 0:
        if forloop == 1:
            raise MappingError(f"input {fmt(shape)}: fmap {fmap} with for-loop range 1; use fmap -1")
        if tile[fmap] % forloop:
            raise MappingError(
                f"input {fmt(shape)} fmap {fmap}: per-block dim {fmap} ({tile[fmap]}) is not "
                f"divisible by the for-loop range {forloop}"
            )
        tile[fmap] //= forloop
    return im, tuple(tile)


def block_output_shape(tile: Shape, grid: Dim3, omap: Sequence[int]) -> tuple[Dim3, Shape]:
    """Device shape written by all blocks: each mapped grid axis multiplies its dim."""
    om = _check_map("omap", omap, grid, len(tile), tile)
    out = list(tile)
    for axis, d, g in zip(AXES, om, grid, strict=True):
        if g > 1 and d == -1:
            raise MappingError(f"omap {list(om)}: grid axis {axis} has {g} blocks but maps no dim of {fmt(tile)}")
        if d >= 0:
            out[d] *= g
    return om, tuple(out)
