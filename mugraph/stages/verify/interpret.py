"""Run a kernel graph in an algebra: kernel ops directly, block graphs vectorised over the grid.

A block-graph tensor is held for all blocks at once as an array of shape (gx, gy, gz, *tile), where
a grid axis along which the value does not vary has size 1 and broadcasts. The for-loop's
iterations are evaluated at once along one more axis where their values fit in memory, one after
another where they do not; the accumulators add up, and the ops after accumulation run once.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import prod
from typing import assert_never

from mugraph.ir.families import BOUNDARY, PREDEFINED
from mugraph.ir.graph import BlockGraph, KernelGraph, Op, Tensor, eps_of
from mugraph.ir.types import ACCUMULATORS, AccumKind, OpKind
from mugraph.stages.verify import products
from mugraph.stages.verify.algebra import Algebra, Array, merges
from mugraph.stages.verify.reuse import ValueCache

GRID_AXES = 3
LOOP_AT_ONCE_BYTES = 256 << 20  # above it, the for-loop runs one iteration at a time


def _reduce_last(alg: Algebra, x: Array) -> Array:
    return alg.sum(x, -1)


def _rms(alg: Algebra, sum_sq: Array, n: int, eps: float = 0.0) -> Array:
    """sqrt(sum_sq / n + eps). eps is exact in every algebra: a float is a dyadic rational (in Z_pq
    it is n·d⁻¹), and eps = 0 adds nothing, so such graphs compute exactly what they did before."""
    mean = alg.scale(sum_sq, Fraction(1, n))
    return alg.sqrt(alg.shift(mean, Fraction(eps)) if eps else mean)


def _layer_norm(alg: Algebra, x: Array, eps: float) -> Array:
    """(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) over the last axis."""
    n = x.shape[-1]
    centred = alg.add(x, alg.scale(_reduce_last(alg, x), Fraction(-1, n)))
    return alg.div(centred, _rms(alg, _reduce_last(alg, alg.mul(centred, centred)), n, eps))


def _concat(alg: Algebra, a: Array, b: Array, axis: int) -> Array:
    """Concatenate along a (negative) axis, broadcasting every other axis first."""
    xp = alg.xp
    ash, bsh = list(a.shape), list(b.shape)
    if len(ash) != len(bsh):  # block arrays always share rank; kernel arrays too
        raise AssertionError("concat of arrays of different rank")
    full = [max(x, y) for x, y in zip(ash, bsh, strict=True)]
    full_a, full_b = list(full), list(full)
    full_a[axis], full_b[axis] = ash[axis], bsh[axis]
    return xp.concatenate([xp.broadcast_to(a, full_a), xp.broadcast_to(b, full_b)], axis=axis)


def apply_common(alg: Algebra, op: Op, args: Sequence[Array], rank: int) -> Array:
    """A computing op at either level. `rank` is the tensor rank; axes are counted from the end so
    leading grid axes are transparent."""
    k = op.kind
    if k not in PREDEFINED:
        raise NotImplementedError(
            f"{k} is not applied here: the walks handle inputs, outputs, graph-defined ops and accumulators"
        )
    match k:
        case OpKind.MATMUL:
            return alg.matmul(args[0], args[1])
        case OpKind.ADD:
            return alg.add(args[0], args[1])
        case OpKind.MUL:
            return alg.mul(args[0], args[1])
        case OpKind.DIV:
            return alg.div(args[0], args[1])
        case OpKind.EXP:
            return alg.exp(args[0])
        case OpKind.SQUARE:
            return alg.mul(args[0], args[0])
        case OpKind.SQRT:
            return alg.sqrt(args[0])
        case OpKind.SILU:
            return alg.silu(args[0])
        case OpKind.GELU:
            return alg.gelu(args[0])
        case OpKind.GELU_ERF:
            return alg.gelu_erf(args[0])
        case OpKind.RELU:
            return alg.relu(args[0])
        case OpKind.CLAMP:
            return alg.clamp(args[0], op.float_attr("lo"), op.float_attr("hi"))
        case OpKind.MUL_SCALAR:
            return alg.scale(args[0], Fraction(op.float_attr("scalar")))
        case OpKind.REDUCTION:
            return alg.sum(args[0], op.int_attr("dim") - rank)
        case OpKind.RMS_NORM:
            x = args[0]
            return alg.div(x, _rms(alg, _reduce_last(alg, alg.mul(x, x)), x.shape[-1], eps_of(op)))
        case OpKind.LAYER_NORM:
            return _layer_norm(alg, args[0], eps_of(op))
        case OpKind.CONCAT:
            return _concat(alg, args[0], args[1], op.int_attr("dim") - rank)
        case _ as unreachable:
            assert_never(unreachable)


def partition(alg: Algebra, x: Array, bg: BlockGraph, imap: Sequence[int], fmap: int) -> Array:
    """View a device tensor as per-block tiles: shape (gx|1, gy|1, gz|1, [F,] *tile).

    Along a mapped dim the grid index is the major part, then (with fmap) the iteration index.
    """
    xp = alg.xp
    axis_of_dim = {d: a for a, d in enumerate(imap) if d >= 0}
    split: list[int] = []
    pos_grid: dict[int, int] = {}
    pos_f = -1
    pos_tile: list[int] = []
    for d, n in enumerate(x.shape):
        if d in axis_of_dim:
            a = axis_of_dim[d]
            pos_grid[a] = len(split)
            split.append(bg.grid[a])
            n //= bg.grid[a]
        if d == fmap:
            pos_f = len(split)
            split.append(bg.forloop)
            n //= bg.forloop
        pos_tile.append(len(split))
        split.append(n)
    y = x.reshape(split)
    order = [pos_grid[a] for a in range(GRID_AXES) if a in pos_grid]
    order += [pos_f] if pos_f >= 0 else []
    y = xp.transpose(y, order + pos_tile)
    for a in range(GRID_AXES):
        if a not in pos_grid:
            y = xp.expand_dims(y, a)
    return y


def assemble(alg: Algebra, s: Array, bg: BlockGraph, omap: Sequence[int]) -> Array:
    """Inverse of partition for outputs: block b's tile goes to chunk b of each mapped dim."""
    xp = alg.xp
    rank = s.ndim - GRID_AXES
    s = xp.broadcast_to(s, tuple(bg.grid) + tuple(s.shape[GRID_AXES:]))
    order: list[int] = []
    out_shape: list[int] = []
    for d in range(rank):
        n = s.shape[GRID_AXES + d]
        for a in range(GRID_AXES):
            if omap[a] == d:
                order.append(a)
                n *= bg.grid[a]
        order.append(GRID_AXES + d)
        out_shape.append(n)
    unmapped = [a for a in range(GRID_AXES) if omap[a] < 0]  # each of size 1 (validated)
    y = xp.transpose(s, unmapped + order)
    return xp.ascontiguousarray(y).reshape(out_shape)


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
                env[out] = _accum_final(alg, kind, acc[out], tensors[op.inputs[0]].shape, bg.forloop, eps_of(op))
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
                    part = _accum_part(alg, kind, it[op.inputs[0]], bg.rdx)
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
                part = every_iteration(_accum_part(alg, kind, it[op.inputs[0]], bg.rdx))
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


def _accum_part(alg: Algebra, kind: AccumKind, x: Array, rdx: int) -> Array:
    """One iteration's contribution to an accumulator."""
    match kind:
        case OpKind.ACCUM_NO_RED:
            return x
        case OpKind.ACCUM_SUM | OpKind.ACCUM_MEAN:
            return _reduce_last(alg, x)
        case OpKind.ACCUM_RMS:
            return _reduce_last(alg, alg.mul(x, x))
        case OpKind.ACCUM_REDTOX:
            n = x.shape[-1]
            folded = x.reshape(tuple(x.shape[:-1]) + (n // rdx, rdx))
            return alg.sum(folded, -2).reshape(tuple(x.shape[:-1]) + (rdx,))
        case _ as unreachable:
            assert_never(unreachable)


def _accum_final(
    alg: Algebra, kind: AccumKind, total: Array, x_shape: Sequence[int], forloop: int, eps: float = 0.0
) -> Array:
    """An accumulator's output from its total over the iterations."""
    match kind:
        case OpKind.ACCUM_NO_RED | OpKind.ACCUM_SUM | OpKind.ACCUM_REDTOX:
            return total
        case OpKind.ACCUM_MEAN:
            return alg.scale(total, Fraction(1, forloop * x_shape[-1]))
        case OpKind.ACCUM_RMS:
            return _rms(alg, total, forloop * x_shape[-1], eps)
        case _ as unreachable:
            assert_never(unreachable)


def evaluate(alg: Algebra, graph: KernelGraph, inputs: Sequence[Array], cache: ValueCache | None = None) -> list[Array]:
    """The graph's outputs, in the order they were marked, for `inputs` in input order. With a
    cache (bound to these inputs), values an earlier graph computed are reused (reuse.py)."""
    return _evaluate(alg, graph, inputs, cache, -1)


def probe_outputs(
    alg: Algebra, graph: KernelGraph, inputs: Sequence[Array], cache: ValueCache | None = None
) -> list[Array] | None:
    """Where the graph's last computing op is a graph-defined op that makes every output: the
    tile block (0, 0, 0) of its grid writes to each output (the output's corner, from index 0 in
    every dim), in output order, everything before that op evaluated as `evaluate` does; None
    for any other graph. A candidate whose corners differ from the reference's differs from it,
    and a search's candidates mostly end so: their new block graph is the part no earlier
    candidate computed, and its grid is what costs."""
    last = max((i for i, op in enumerate(graph.ops) if op.kind not in BOUNDARY), default=-1)
    if last < 0 or graph.ops[last].kind is not OpKind.CUSTOMIZED:
        return None
    made = set(graph.ops[last].outputs)
    if not all(op.inputs[0] in made for op in graph.ops_of(OpKind.OUTPUT)):
        return None
    return _evaluate(alg, graph, inputs, cache, last)


def _evaluate(
    alg: Algebra, graph: KernelGraph, inputs: Sequence[Array], cache: ValueCache | None, probe_at: int
) -> list[Array]:
    """`evaluate`, with the graph-defined op at index `probe_at` (if any) run as a probe."""
    env: dict[int, Array] = {}
    keys: dict[int, int] = {}
    n_in = 0
    outputs: list[Array] = []
    if cache is not None:
        cache.start()
    for at, op in enumerate(graph.ops):
        match op.kind:
            case OpKind.INPUT:
                t = graph.tensors[op.outputs[0]]
                x = inputs[n_in]
                if tuple(x.shape) != t.shape:
                    raise ValueError(f"input {n_in} has shape {tuple(x.shape)}, expected {t.shape}")
                env[t.index] = x
                if cache is not None:
                    keys[t.index] = cache.key("input", n_in)
                n_in += 1
            case OpKind.OUTPUT:
                outputs.append(env[op.inputs[0]])
            case OpKind.CUSTOMIZED:
                assert op.block is not None
                args = [env[i] for i in op.inputs]
                in_keys = [keys.get(i, -1) for i in op.inputs]
                outs, out_keys = run_block(alg, op.block, args, cache, in_keys, probe=at == probe_at)
                env.update(zip(op.outputs, outs, strict=True))
                if cache is not None and at != probe_at:
                    keys.update(zip(op.outputs, out_keys, strict=True))
            case _:
                out = op.outputs[0]
                key = cache.key("kernel", op.kind, op.attrs, *(keys[i] for i in op.inputs)) if cache is not None else -1
                value = cache.get(key) if cache is not None else None
                if value is None:
                    args = [env[i] for i in op.inputs]
                    by_content = products.content_key(op, args, [keys.get(i, -1) for i in op.inputs], cache)
                    value = cache.get(by_content) if cache is not None and by_content >= 0 else None
                    if value is None:
                        value = apply_common(alg, op, args, len(graph.tensors[out].shape))
                        if cache is not None and by_content >= 0:
                            cache.put(by_content, value)
                    if cache is not None:
                        cache.put(key, value)
                env[out] = value
                keys[out] = key
    if n_in != len(inputs):
        raise ValueError(f"{len(inputs)} inputs given, the graph has {n_in}")
    return outputs
