"""A block graph run in an algebra, vectorised over its grid (its tensors held as `tiles` lays them out).

The for-loop's iterations are evaluated at once along one more axis where their values fit in memory,
one after another where they do not; the accumulators add up, and the ops after accumulation run once.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from mugraph.ir.graph import BlockGraph, Op, Tensor, eps_of
from mugraph.ir.types import ACCUMULATORS, OpKind
from mugraph.stages.verify import products
from mugraph.stages.verify.algebra import Algebra, Array, merges
from mugraph.stages.verify.op_meanings import accum_final, accum_part, apply_common
from mugraph.stages.verify.reuse import ValueCache
from mugraph.stages.verify.tiles import GRID_AXES, assemble, partition

LOOP_AT_ONCE_BYTES = 256 << 20  # above it, the for-loop runs one iteration at a time


def _in_loop(op: Op, tensors: Sequence[Tensor]) -> bool:
    return op.kind is not OpKind.OUTPUT and not tensors[op.outputs[0]].after_accum


def _block_keys(bg: BlockGraph, input_keys: Sequence[int], cache: ValueCache) -> dict[int, int]:
    """The structural key of every block tensor (see reuse.py); in-loop tensors are named once
    for all iterations, which their accumulators cover."""
    keys: dict[int, int] = {}
    n_in = 0
    for op in bg.ops:
        match op.kind:
            case OpKind.INPUT:
                keys[op.outputs[0]] = cache.key(
                    "tile", input_keys[n_in], op.dims_attr("imap"), op.int_attr("fmap"), bg.grid, bg.forloop
                )
                n_in += 1
            case OpKind.OUTPUT:
                pass
            case kind:
                rdx = bg.rdx if kind in ACCUMULATORS else 0
                keys[op.outputs[0]] = cache.key("block", kind, op.attrs, rdx, *(keys[i] for i in op.inputs))
    return keys


def _needed(body: Sequence[Op], wanted: set[int]) -> list[Op]:
    """The loop ops that the accumulators in `wanted` (output indices) depend on, in order."""
    need = set(wanted)
    keep: list[Op] = []
    for op in reversed(body):
        if op.outputs[0] in need:
            keep.append(op)
            need.update(op.inputs)
    return keep[::-1]


def run_block(
    alg: Algebra,
    bg: BlockGraph,
    inputs: Sequence[Array],
    cache: ValueCache | None = None,
    input_keys: Sequence[int] = (),
    probe: bool = False,
) -> tuple[list[Array], list[int]]:
    """The block graph's outputs (assembled device tensors) and, with a cache, their keys. With
    `probe`, only block (0, 0, 0) runs and its output tiles are returned, unassembled (and no
    keys): the corner of each output, cheap to compare before the whole grid is paid for. A
    probe reads cached values but stores none, since what it computes is partial."""
    tensors: list[Tensor] = bg.tensors
    keys = _block_keys(bg, input_keys, cache) if cache is not None else {}
    outs = [op for op in bg.ops if op.kind is OpKind.OUTPUT]
    out_keys: list[int] = []
    if cache is not None and not probe:
        out_keys = [cache.key("assemble", keys[op.inputs[0]], op.dims_attr("omap")) for op in outs]
        hits = [cache.get(k) for k in out_keys]
        if all(h is not None for h in hits):
            return hits, out_keys
    views: dict[int, tuple[Array, bool]] = {}
    n_in = 0
    for op in bg.ops:
        if op.kind is OpKind.INPUT:
            imap, fmap = op.dims_attr("imap"), op.int_attr("fmap")
            view = partition(alg, inputs[n_in], bg, imap, fmap)
            views[op.outputs[0]] = (view[:1, :1, :1] if probe else view, fmap >= 0)
            n_in += 1
    env: dict[int, Array] = {}  # after the loop: accumulated and post-loop values
    missing: set[int] = set()
    for op in bg.ops:
        if op.kind in ACCUMULATORS:
            hit = cache.get(keys[op.outputs[0]]) if cache is not None else None
            if hit is None:
                missing.add(op.outputs[0])
            else:
                env[op.outputs[0]] = hit[:1, :1, :1] if probe else hit
    # Accumulated products that are tiles of their inputs' device product (products.py). A probe
    # takes them only from a cache, where the product it pays for in full serves later candidates.
    if products.SHORTCUTS and missing and (cache is not None or not probe):
        for out, dp in products.device_products(bg, missing, [tuple(x.shape) for x in inputs]).items():
            tiles = partition(alg, products.product(alg, dp, inputs, input_keys, cache), bg, dp.imap, -1)
            env[out] = tiles[:1, :1, :1] if probe else tiles
            missing.discard(out)
            if cache is not None and not probe:
                cache.put(keys[out], tiles)
    # The loop body: every op up to and including the accumulators (their outputs are the
    # only after-accumulation tensors whose inputs are not), as far as a missing one needs it.
    body = _needed([op for op in bg.ops if op.kind in ACCUMULATORS or _in_loop(op, tensors)], missing)
    if body and bg.forloop > 1 and _loop_bytes(bg, body) <= LOOP_AT_ONCE_BYTES:
        acc = _loop_at_once(alg, bg, body, views)
    else:
        acc = _loop_by_iteration(alg, bg, body, views)
    outputs: list[Array] = []
    for op in bg.ops:
        match op.kind:
            case OpKind.INPUT:
                continue
            case OpKind.OUTPUT:
                x = env[op.inputs[0]]
                outputs.append(x[0, 0, 0] if probe else assemble(alg, x, bg, op.dims_attr("omap")))
                continue
            case kind if kind in ACCUMULATORS:
                out = op.outputs[0]
                if out not in missing:
                    continue
                env[out] = accum_final(alg, kind, acc[out], tensors[op.inputs[0]].shape, bg.forloop, eps_of(op))
            case _:
                out = op.outputs[0]
                if not tensors[out].after_accum:
                    continue
                env[out] = apply_common(alg, op, [env[i] for i in op.inputs], len(tensors[out].shape))
        if cache is not None and not probe:
            cache.put(keys[out], env[out])
    if cache is not None and not probe:
        for k, v in zip(out_keys, outputs, strict=True):
            cache.put(k, v)
    return outputs, out_keys


def _loop_by_iteration(
    alg: Algebra, bg: BlockGraph, body: Sequence[Op], views: dict[int, tuple[Array, bool]]
) -> dict[int, Array]:
    """The accumulators' totals, one iteration after another."""
    tensors = bg.tensors
    acc: dict[int, Array] = {}
    for t in range(bg.forloop if body else 0):
        it: dict[int, Array] = {}
        for op in body:
            out = op.outputs[0]
            match op.kind:
                case OpKind.INPUT:
                    view, per_iter = views[out]
                    it[out] = view[:, :, :, t] if per_iter else view
                case kind if kind in ACCUMULATORS:
                    part = accum_part(alg, kind, it[op.inputs[0]], bg.rdx)
                    acc[out] = part if t == 0 else alg.add(acc[out], part)
                case _:
                    it[out] = apply_common(alg, op, [it[i] for i in op.inputs], len(tensors[out].shape))
    return acc


def _loop_bytes(bg: BlockGraph, body: Sequence[Op]) -> int:
    """What evaluating every iteration at once holds: each loop value for all blocks and iterations."""
    blocks = prod(bg.grid) * bg.forloop
    return sum(8 * blocks * prod(bg.tensors[op.outputs[0]].shape) for op in body if op.kind is not OpKind.INPUT)


def _loop_at_once(
    alg: Algebra, bg: BlockGraph, body: Sequence[Op], views: dict[int, tuple[Array, bool]]
) -> dict[int, Array]:
    """The accumulators' totals with every iteration evaluated at once, along an iteration axis
    after the grid axes (axes count from the end, so the ops do not see it). An accumulator adds
    up along that axis. A NO_RED accumulator of a matmul is one matmul over the iterations and
    the contraction together (Σ_t A_t·B_t = [A_0 … A_F-1]·[B_0; …; B_F-1]): one large product
    per block instead of F small ones, the same value in every algebra up to float rounding."""
    xp, F, T = alg.xp, bg.forloop, GRID_AXES
    tensors = bg.tensors
    makers = {op.outputs[0]: op for op in body}
    merged = {
        op.outputs[0]: makers[op.inputs[0]]
        for op in body
        if op.kind is OpKind.ACCUM_NO_RED and op.inputs[0] in makers and makers[op.inputs[0]].kind is OpKind.MATMUL
    }
    wanted = {op.outputs[0] for op in body if op.kind in ACCUMULATORS and op.outputs[0] not in merged}
    wanted.update(i for m in merged.values() for i in m.inputs)
    it: dict[int, Array] = {}
    acc: dict[int, Array] = {}

    def every_iteration(x: Array) -> Array:
        return xp.broadcast_to(x, tuple(x.shape[:T]) + (F,) + tuple(x.shape[T + 1 :]))

    for op in _needed(body, wanted):
        out = op.outputs[0]
        match op.kind:
            case OpKind.INPUT:
                view, per_iter = views[out]
                it[out] = view if per_iter else xp.expand_dims(view, T)
            case kind if kind in ACCUMULATORS:
                part = every_iteration(accum_part(alg, kind, it[op.inputs[0]], bg.rdx))
                acc[out] = xp.squeeze(alg.sum(part, T), axis=T)
            case _:
                it[out] = apply_common(alg, op, [it[i] for i in op.inputs], len(tensors[out].shape))
    for out, product in merged.items():
        a, b = (it[i] for i in product.inputs)
        if products.SHORTCUTS and (a.shape[T] == 1 or b.shape[T] == 1):  # an operand the iterations share
            acc[out] = products.shared_operand_product(alg, a, b, T, F)
            continue
        a, b = every_iteration(a), every_iteration(b)
        a = xp.moveaxis(a, T, -2)  # (..., m, F, k)
        b = xp.moveaxis(b, T, -3)  # (..., F, k, n)
        if not (merges(a, [a.ndim - 2, a.ndim - 1]) and merges(b, [b.ndim - 3, b.ndim - 2])):
            # merging would copy an operand (a weight tiled along its columns by the loop): the
            # iterations' products batched, then added up
            acc[out] = xp.squeeze(alg.sum(alg.matmul(xp.moveaxis(a, -2, T), xp.moveaxis(b, -3, T)), T), axis=T)
            continue
        a = a.reshape(tuple(a.shape[:-2]) + (F * a.shape[-1],))
        b = b.reshape(tuple(b.shape[:-3]) + (F * b.shape[-2], b.shape[-1]))
        acc[out] = alg.matmul(a, b)
    return acc
