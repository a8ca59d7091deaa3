"""Products the interpreter takes from whole tensors instead of tile by tile, exactly.

Fingerprints are dominated by matrix products, and a search's candidates compute the same products
many ways; three identities let the interpreter compute each once (a pass confirming rms_norm's 46
μGraphs made 123 products of 16x4096 by 4096x6144, 70% of its time: 2.6 s before, 0.47 s after).

- A device product. A block graph that multiplies a tile of X by a tile of Y and adds the products
  up over a for-loop that walks the contraction (ACCUM_NO_RED of a MATMUL of two block inputs) holds
  Σ_t Σ_k X[r, t·K/F + k] · Y[t·K/F + k, c] = (X·Y)[r, c] for each block's rows r and columns c,
  provided no grid axis splits the contraction: X·Y is computed once per set of inputs (cached
  under its inputs' keys) and each block's tile taken as a view. Batched products too, where the
  grid splits the batches X and Y share alike; only where all this is read off the block's maps.
- A product by content. A kernel-level product whose small operand different candidates compute
  differently (rms_norm's normalised x, by a block graph on each grid) is found in the cache by that
  operand's contents (a 128-bit BLAKE2b digest), which structural keys cannot see alike.
- A shared operand. Σ_t A·B_t = A·Σ_t B_t where A is the same in every iteration: one pass over B
  instead of a merged copy of it.

Each is an identity in every ring, so in Z_pq the values are bit for bit those of the tiles, and in
float64 they differ by rounding only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import prod

import numpy as np

from mugraph.ir.graph import BlockGraph, Op
from mugraph.ir.types import Dim3, OpKind
from mugraph.stages.verify.algebra import Algebra, Array
from mugraph.stages.verify.reuse import ValueCache

__all__ = ["SHORTCUTS", "DeviceProduct", "content_key", "device_products", "product", "shared_operand_product"]

# Off, the interpreter evaluates every product as the graph writes it, tile by tile (the tests compare
# the two bit for bit).
SHORTCUTS = True
CONTENT_MIN_MACS = 1 << 22  # a kernel-level product at least this large is looked up by its operands' contents
CONTENT_MAX_BYTES = 4 << 20  # operands up to this size are hashed for it (about 4 ms), larger ones named


@dataclass(frozen=True, slots=True)
class DeviceProduct:
    """An accumulator whose value is a tile of X·Y: X and Y by their places among the block graph's
    inputs, and the map that partitions X·Y over the grid (each axis: a dim of X·Y, or -1)."""

    left: int
    right: int
    imap: Dim3


def _maps(op: Op) -> tuple[tuple[int, ...], int]:
    return op.dims_attr("imap"), op.int_attr("fmap")


def _dims_in_product(rank: int, out_rank: int, contraction: int, kept: int, kept_to: int) -> dict[int, int]:
    """An operand's dims as X·Y's dims (batch dims aligned from the end, as matmul broadcasts them);
    its contraction dim as -2, which no grid axis may split."""
    dims = {d: out_rank - rank + d for d in range(rank - 2)}
    dims[contraction] = -2
    dims[kept] = kept_to
    return dims


def device_product(
    bg: BlockGraph,
    accum: Op,
    makers: Mapping[int, Op],
    places: Mapping[int, int],
    shapes: Sequence[Sequence[int]],
) -> DeviceProduct | None:
    """The device product `accum`'s value is a tile of, or None. `makers`: each block tensor's op;
    `places`: each block input tensor's place among the graph's inputs; `shapes`: the device inputs'
    shapes. Batched products too: a batch dim that both operands hold with more than one entry is
    split by the same grid axis in both or in neither, so each block pairs the batches X·Y pairs."""
    if accum.kind is not OpKind.ACCUM_NO_RED:
        return None
    mm = makers.get(accum.inputs[0])
    if mm is None or mm.kind is not OpKind.MATMUL:
        return None
    a, b = (makers.get(i) for i in mm.inputs)
    if a is None or b is None or a.kind is not OpKind.INPUT or b.kind is not OpKind.INPUT:
        return None
    left, right = places[a.outputs[0]], places[b.outputs[0]]
    xs, ys = shapes[left], shapes[right]
    rx, ry = len(xs), len(ys)
    if rx < 2 or ry < 2:
        return None
    rank = max(rx, ry)
    (imap_a, fmap_a), (imap_b, fmap_b) = _maps(a), _maps(b)
    if bg.forloop > 1 and (fmap_a != rx - 1 or fmap_b != ry - 2):  # the loop must walk the contraction in both
        return None
    in_x = _dims_in_product(rx, rank, rx - 1, rx - 2, rank - 2)
    in_y = _dims_in_product(ry, rank, ry - 2, ry - 1, rank - 1)
    size_x = {in_x[d]: n for d, n in enumerate(xs)}
    size_y = {in_y[d]: n for d, n in enumerate(ys)}
    imap: list[int] = []
    for axis in range(len(bg.grid)):
        px = in_x[imap_a[axis]] if imap_a[axis] >= 0 else -1
        py = in_y[imap_b[axis]] if imap_b[axis] >= 0 else -1
        if px == -2 or py == -2:  # a grid axis splits the contraction: each block sums a part of it
            return None
        if px >= 0 and py >= 0 and px != py:  # rows and columns (or two batch dims) on one axis
            return None
        dim = max(px, py)
        if 0 <= dim < rank - 2 and size_x.get(dim, 1) > 1 and size_y.get(dim, 1) > 1 and (px < 0 or py < 0):
            return None  # a batch dim both hold, split in one only: blocks would pair other batches
        imap.append(dim)
    return DeviceProduct(left, right, (imap[0], imap[1], imap[2]))


def device_products(bg: BlockGraph, wanted: set[int], shapes: Sequence[Sequence[int]]) -> dict[int, DeviceProduct]:
    """The accumulators among `wanted` (output tensor indices) whose values are tiles of a device
    product, each with how (`device_product`)."""
    makers = {op.outputs[0]: op for op in bg.ops if op.outputs}
    places: dict[int, int] = {}
    for op in bg.ops:
        if op.kind is OpKind.INPUT:
            places[op.outputs[0]] = len(places)
    out = {}
    for op in bg.ops:
        if op.outputs and op.outputs[0] in wanted:
            found = device_product(bg, op, makers, places, shapes)
            if found is not None:
                out[op.outputs[0]] = found
    return out


def product(
    alg: Algebra, dp: DeviceProduct, inputs: Sequence[Array], input_keys: Sequence[int], cache: ValueCache | None
) -> Array:
    """X·Y for a device product, from the cache when its inputs have keys there."""
    x, y = inputs[dp.left], inputs[dp.right]
    kx = input_keys[dp.left] if dp.left < len(input_keys) else -1
    ky = input_keys[dp.right] if dp.right < len(input_keys) else -1
    if cache is None or kx < 0 or ky < 0:
        return alg.matmul(x, y)
    key = cache.key("product", kx, ky)
    value = cache.get(key)
    if value is None:
        value = alg.matmul(x, y)
        cache.put(key, value)
    return value


def content_key(op: Op, args: Sequence[Array], keys: Sequence[int], cache: ValueCache | None) -> int:
    """For a large kernel-level product, a key naming it by its small operands' contents (and its
    large ones' structures), or -1. Candidates compute the same operand many ways (rms_norm's
    normalised x, by a block graph on each grid), which their structural keys cannot tell alike;
    hashing 16x4096 values costs 0.5 ms against a 10-15 ms product."""
    if not SHORTCUTS or cache is None or op.kind is not OpKind.MATMUL:
        return -1
    if not all(isinstance(a, np.ndarray) for a in args):  # device arrays are not hashed
        return -1
    a, b = args
    if a.ndim < 2 or b.ndim < 2 or prod(a.shape) * b.shape[-1] < CONTENT_MIN_MACS:
        return -1
    small = [x.nbytes <= CONTENT_MAX_BYTES for x in args]
    if not any(small) or any(k < 0 for k, s in zip(keys, small, strict=True) if not s):
        return -1  # nothing to hash, or a large operand without a structural key (a probe's output)
    ids = [cache.content_key(x) if s else k for x, k, s in zip(args, keys, small, strict=True)]
    return cache.key("product by content", *ids)


def shared_operand_product(alg: Algebra, a: Array, b: Array, axis: int, forloop: int) -> Array:
    """Σ_t A_t·B_t over the iterations `axis` where A or B is the same in every iteration
    (size 1 there): the other summed first, then one product (F copies of it where both are shared).
    Exact in every ring; one pass over the varying operand instead of a copy of it merged."""
    xp, T = alg.xp, axis
    shared_a, shared_b = a.shape[T] == 1, b.shape[T] == 1
    a = xp.squeeze(a, axis=T) if shared_a else xp.squeeze(alg.sum(a, T), axis=T)
    b = xp.squeeze(b, axis=T) if shared_b else xp.squeeze(alg.sum(b, T), axis=T)
    out = alg.matmul(a, b)
    return alg.scale(out, Fraction(forloop)) if shared_a and shared_b else out
