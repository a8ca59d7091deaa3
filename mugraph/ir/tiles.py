"""Tile geometry for the Triton kernels: padded extents, index vectors, masks and the element
offsets that imaps, fmaps and omaps give each block and each for-loop iteration.

Triton tensors have power-of-two extents and `tl.dot` wants every dim of at least 16, so a tile
extent n > 1 is padded to max(16, next power of two); an extent of 1 stays 1, so that broadcasting
between tiles works as in the IR. The padded part is masked on loads and stores and kept at zero
wherever a later sum could read it (see `emit_kernel`). Device tensors are row-major unless the
chosen layout puts another dim innermost (`layout_strides`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from mugraph.ir.types import Shape

AXES = "xyz"
MIN_DOT = 16  # tl.dot needs every operand dim >= 16
# The emitted kernels launch with Triton's defaults: 4 warps per program, loads software-pipelined
# over 3 stages. The cost model prices registers and shared memory per program from these.
NUM_WARPS = 4
THREADS = NUM_WARPS * 32
NUM_STAGES = 3


def padded(n: int) -> int:
    """The padded extent of a tile dim: 1 stays 1, anything else the next power of two, at least 16."""
    if n == 1:
        return 1
    return max(MIN_DOT, 1 << (n - 1).bit_length())


def padded_shape(shape: Sequence[int]) -> Shape:
    return tuple(padded(n) for n in shape)


def row_major_strides(shape: Sequence[int]) -> Shape:
    return tuple(prod(shape[d + 1 :]) for d in range(len(shape)))


def layout_strides(shape: Sequence[int], inner: int) -> Shape:
    """Element strides with dim `inner` innermost (stride 1) and the other dims row-major around it:
    the device layout the layout stage chooses, given as the innermost dim."""
    order = [d for d in range(len(shape)) if d != inner] + [inner]
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def index(rank: int, dim: int, extent: int) -> str:
    """`tl.arange(0, P)` placed on `dim` of a rank-`rank` tile (other dims broadcast)."""
    ar = f"tl.arange(0, {padded(extent)})"
    if rank == 1:
        return ar
    return ar + "[" + ", ".join(":" if d == dim else "None" for d in range(rank)) + "]"


def mask(shape: Sequence[int]) -> str | None:
    """The tile's in-bounds mask, or None when no dim is padded."""
    parts = [f"({index(len(shape), d, n)} < {n})" for d, n in enumerate(shape) if padded(n) != n]
    return " & ".join(parts) if parts else None


def tile_offsets(shape: Sequence[int], strides: Sequence[int]) -> str:
    """Element offsets of a tile's elements from its first element, in a row-major device tensor."""
    terms = []
    for d, (n, s) in enumerate(zip(shape, strides, strict=True)):
        if n == 1:
            continue
        ix = index(len(shape), d, n)
        terms.append(ix if s == 1 else f"{ix} * {s}")
    if not terms:  # a tile of one element: still a block of offsets, so loads and stores see a tile
        return (
            f"tl.zeros({tuple(shape)!r}, dtype=tl.int32)".replace(",)", ")")
            if len(shape) > 1
            else "tl.zeros((1,), dtype=tl.int32)"
        )
    return " + ".join(terms)


@dataclass(frozen=True)
class Access:
    """Where one block's tile of a device tensor lies: a scalar base offset per block (from the
    program ids), the per-iteration step (fmap), and the offsets and mask within the tile."""

    base: str
    step: int
    offsets: str
    mask: str | None


def _pid_terms(mapping: Sequence[int], extents: Sequence[int], strides: Sequence[int]) -> str:
    terms = []
    for a, d in enumerate(mapping):
        if d < 0:
            continue
        scale = extents[d] * strides[d]
        terms.append(f"pid_{AXES[a]}" if scale == 1 else f"pid_{AXES[a]} * {scale}")
    return " + ".join(terms) if terms else "0"


def input_access(
    dshape: Shape,
    tile: Shape,
    grid: Sequence[int],
    imap: Sequence[int],
    fmap: int,
    forloop: int,
    strides: Shape | None = None,
) -> Access:
    """A block input: along a dim mapped by grid axis a, block b starts at b * (dim / grid[a]); the
    for-loop then steps by one tile along the fmap dim (the grid index is the major part)."""
    strides = strides or row_major_strides(dshape)
    per_block = list(dshape)
    for a, d in enumerate(imap):
        if d >= 0:
            per_block[d] //= grid[a]
    step = tile[fmap] * strides[fmap] if fmap >= 0 else 0
    return Access(_pid_terms(imap, per_block, strides), step, tile_offsets(tile, strides), mask(tile))


def output_access(dshape: Shape, tile: Shape, omap: Sequence[int], strides: Shape | None = None) -> Access:
    """A block output: block b's tile goes to chunk b of each dim its grid axes map."""
    strides = strides or row_major_strides(dshape)
    return Access(_pid_terms(omap, tile, strides), 0, tile_offsets(tile, strides), mask(tile))
