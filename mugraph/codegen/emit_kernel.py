"""One graph-defined op's block graph as one `@triton.jit` kernel.

The launch grid is the block graph's grid (`tl.program_id` per axis). Inputs whose fmap is -1 are
loaded once before the for-loop, together with every op that depends only on them; the rest of the
loop body runs once per iteration, each accumulator adds its tile in float32 (its reduction over the
last dim, if any, runs once after the loop), the ops after accumulation run once after the loop,
and each output is stored where its omap puts the block's tile. Tiles are float32 in the kernel
(the device dtype, fp16 or float32, on loads and stores; loaded tiles go straight into `tl.dot`,
computed ones are rounded to the device dtype first, as Mirage's shared memory holds fp16). float32
operands enter `tl.dot` as full float32 ("ieee") unless TF32 is chosen (`tf32=True`).

Padding (see `tiles`) is kept at zero: loads fill it with 0, and the result of every op that can turn
a zero into something else (exp, div, clamp, rms_norm, a broadcasting add) is masked again, so sums,
reductions and matmul contractions never read garbage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import assert_never

from mugraph.codegen.errors import CodegenError
from mugraph.codegen.text import inert
from mugraph.ir.families import PREDEFINED
from mugraph.ir.graph import BlockGraph, KernelGraph, Op, eps_of
from mugraph.ir.shapes import fmt
from mugraph.ir.tiles import AXES, MIN_DOT, input_access, output_access, padded, padded_shape, tile_offsets
from mugraph.ir.tiles import mask as tile_mask
from mugraph.ir.types import ACCUMULATORS, AccumKind, DType, OpKind, Shape

GELU_C = 0.7978845608028654  # sqrt(2/pi), the tanh form of GELU as in the float64 interpreter
SQRT1_2 = 0.7071067811865476  # 1/sqrt(2), the exact (erf) form of GELU
# The element type of device tensors and of the tiles fed to tl.dot; arithmetic is float32 either way.
TL_TYPES = {DType.FLOAT16: "tl.float16", DType.BFLOAT16: "tl.bfloat16", DType.FLOAT32: "tl.float32"}


@dataclass
class KernelSource:
    """The kernel's text and what the launcher needs: its name, its grid, and per concat op a
    float32 scratch buffer of shape (blocks, *padded tile)."""

    name: str
    grid: tuple[int, int, int]
    lines: list[str]
    scratch: list[Shape] = field(default_factory=list)


def _shape_text(shape: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


class _Body:
    """The kernel body being written: four sections (set-up, before the loop, the loop, after)."""

    def __init__(self, bg: BlockGraph, name: str, tf32: bool = False, interpreted: bool = False) -> None:
        self.bg = bg
        self.name = name
        self.tf32 = tf32
        self.interpreted = interpreted
        self.setup: list[str] = []
        self.before: list[str] = []
        self.loop: list[str] = []
        self.after: list[str] = []
        self.scratch: list[Shape] = []
        self.invariant: set[int] = set()
        self.loaded: set[int] = set()  # input tiles, loaded as fp16 into `s<i>h`

    def shape(self, t: int) -> Shape:
        return self.bg.tensors[t].shape

    def mask_of(self, shape: Shape) -> str | None:
        """The name of the in-bounds mask of tiles of `shape`, made once before the loop (None: no padding)."""
        m = tile_mask(shape)
        if m is None:
            return None
        name = "mask_" + "x".join(map(str, shape))
        line = f"{name} = {m}"
        if line not in self.setup:
            self.setup.append(line)
        return name

    def masked(self, out: int, expr: str) -> str:
        m = self.mask_of(self.shape(out))
        return expr if m is None else f"tl.where({m}, {expr}, 0.0)"

    # -- ops --------------------------------------------------------------------------------------
    def matmul(self, a: int, b: int, out: int) -> str:
        pa, pb = padded_shape(self.shape(a)), padded_shape(self.shape(b))
        if len(pa) <= 3:
            return self._product(a, b, pa, pb, lambda expr, t: expr)
        # tiles of 4 or more dims (attention's [B, H, S, D] with its batch kept): the leading dims merged
        # into one batch dim (tl.dot takes 2 or 3), the product taken, and its dims given back
        batch = prod(pa[:-2])
        ma, mb = (batch, *pa[-2:]), (batch, *pb[-2:])
        merged = {a: ma, b: mb}

        def merge(expr: str, t: int) -> str:
            return f"tl.reshape({expr}, {merged[t]})"

        return f"tl.reshape({self._product(a, b, ma, mb, merge)}, {(*pa[:-1], pb[-1])})"

    def _product(self, a: int, b: int, pa: Shape, pb: Shape, shaped: Callable[[str, int], str]) -> str:
        """The product of tiles `a` and `b` of padded shapes `pa` and `pb` (2 or 3 dims), each operand's
        expression passed through `shaped` (the merge of a 4-d tile's batch dims)."""
        rank = len(pa)
        m, k, n = pa[-2], pa[-1], pb[-1]
        dtype = self.bg.tensors[a].dtype
        fa, fb = (
            shaped(f"s{t}h" if t in self.loaded else narrowed(f"s{t}", dtype, self.interpreted), t) for t in (a, b)
        )
        batch = prod(pa[:-2])
        # float32 operands: full float32 products ("ieee") unless TF32 was chosen (docs/semantics.md)
        opts = "out_dtype=tl.float32"
        if self.bg.tensors[a].dtype is DType.FLOAT32:
            opts += f", input_precision={'tf32' if self.tf32 else 'ieee'!r}"
        elif self.bg.tensors[a].dtype is DType.BFLOAT16 and self.interpreted:
            # Triton's interpreter multiplies bfloat16 operands' bit patterns in tl.dot (3.x); as float32
            # the products are the same (8-bit significands multiply exactly in float32's 24)
            fa, fb, opts = f"{fa}.to(tl.float32)", f"{fb}.to(tl.float32)", opts + ", input_precision='ieee'"
        if min(m, k, n) >= MIN_DOT:
            if rank == 3 and batch == 1:  # a batch of one: a 2-d dot, reshaped back
                dot = f"tl.dot(tl.reshape({fa}, ({m}, {k})), tl.reshape({fb}, ({k}, {n})), {opts})"
                return f"tl.reshape({dot}, (1, {m}, {n}))"
            return f"tl.dot({fa}, {fb}, {opts})"
        # a dim under 16 (tl.dot needs >= 16: a vector, a LoRA rank): a broadcast product summed over the
        # contraction dim, in float32 (an input read only by matmuls is loaded as fp16, `s<i>h`, alone)
        ga, gb = (shaped(f"s{t}h.to(tl.float32)" if t in self.loaded else f"s{t}", t) for t in (a, b))
        if rank == 2:
            return f"tl.sum({ga}[:, :, None] * {gb}[None, :, :], axis=1)"
        return f"tl.sum({ga}[:, :, :, None] * {gb}[:, None, :, :], axis=2)"

    def concat(self, op: Op, out: int) -> str:
        """Concatenation goes through a per-block float32 scratch tile in global memory."""
        a, b = op.inputs
        dim = op.int_attr("dim")
        so = self.shape(out)
        po = padded_shape(so)
        k = len(self.scratch)
        self.scratch.append(po)
        strides = tuple(prod(po[d + 1 :]) for d in range(len(po)))
        block = (
            " + ".join(
                f"pid_{AXES[x]}" + "".join(f" * {self.bg.grid[y]}" for y in range(x))
                for x in range(3)
                if self.bg.grid[x] > 1
            )
            or "0"
        )
        base = f"scr{k}_ptr + ({block}) * {prod(po)}"
        shift = self.shape(a)[dim] * strides[dim]
        lines = self.lines_for(out)
        self.setup.append(f"scr{k}_a = {base} + {tile_offsets(self.shape(a), strides)}  # concat: s{a}, then s{b}")
        self.setup.append(f"scr{k}_b = {base} + {shift} + {tile_offsets(self.shape(b), strides)}")
        self.setup.append(f"scr{k}_all = {base} + {tile_offsets(so, strides)}")
        for src, part in ((a, "a"), (b, "b")):
            m = self.mask_of(self.shape(src))
            lines.append(f"tl.store(scr{k}_{part}, s{src}" + (f", mask={m})" if m else ")"))
        lines.append("tl.debug_barrier()")
        m = self.mask_of(so)
        load = f"tl.load(scr{k}_all" + (f", mask={m}, other=0.0)" if m else ")")
        lines.append(f"s{out} = {load}")
        lines.append("tl.debug_barrier()")
        return f"s{out}"

    def expr(self, op: Op, out: int) -> str:
        """The Triton expression of a computing block op's tile (concat writes its own lines). An op
        whose result can be non-zero where every operand is zero (or NaN from 0/0) is masked again."""
        k, ins = op.kind, [f"s{i}" for i in op.inputs]
        if k not in PREDEFINED:
            raise CodegenError(
                f"block op {k} has no Triton form"
                if k is OpKind.CUSTOMIZED
                else f"block op {k} is not an expression: emit_kernel loads, stores and accumulates it"
            )
        match k:
            case OpKind.MATMUL:
                return self.matmul(op.inputs[0], op.inputs[1], out)
            case OpKind.ADD:  # a broadcast operand's padding lands inside the result
                broadcast = any(self.shape(i) != self.shape(out) for i in op.inputs)
                return self.masked(out, f"{ins[0]} + {ins[1]}") if broadcast else f"{ins[0]} + {ins[1]}"
            case OpKind.MUL:
                return f"{ins[0]} * {ins[1]}"
            case OpKind.DIV:
                return self.masked(out, f"{ins[0]} / {ins[1]}")
            case OpKind.EXP:
                return self.masked(out, f"tl.exp({ins[0]})")
            case OpKind.SQUARE:
                return f"{ins[0]} * {ins[0]}"
            case OpKind.SQRT:
                return f"tl.sqrt({ins[0]})"
            case OpKind.SILU:
                return f"{ins[0]} / (1.0 + tl.exp(-{ins[0]}))"
            case OpKind.GELU:
                cube = f"{ins[0]} * {ins[0]} * {ins[0]}"
                return f"{ins[0]} / (1.0 + tl.exp({-2 * GELU_C!r} * ({ins[0]} + 0.044715 * {cube})))"
            case OpKind.GELU_ERF:
                return f"0.5 * {ins[0]} * (1.0 + tl.math.erf({ins[0]} * {SQRT1_2!r}))"
            case OpKind.RELU:
                return f"tl.maximum({ins[0]}, 0.0)"
            case OpKind.CLAMP:
                lo, hi = op.float_attr("lo"), op.float_attr("hi")
                return self.masked(out, f"tl.minimum(tl.maximum({ins[0]}, {lo!r}), {hi!r})")
            case OpKind.MUL_SCALAR:
                return f"{ins[0]} * {op.float_attr('scalar')!r}"
            case OpKind.REDUCTION:
                return f"tl.sum({ins[0]}, axis={op.int_attr('dim')}, keep_dims=True)"
            case OpKind.RMS_NORM:
                sum_sq = f"tl.sum({ins[0]} * {ins[0]}, axis={len(self.shape(out)) - 1}, keep_dims=True)"
                mean_sq = f"{sum_sq} / {self.shape(out)[-1]}" + _plus_eps(op)
                return self.masked(out, f"{ins[0]} / tl.sqrt({mean_sq})")
            case OpKind.LAYER_NORM:
                return self.layer_norm(op, out)
            case OpKind.CONCAT:
                return self.concat(op, out)
            case _ as unreachable:
                assert_never(unreachable)

    def layer_norm(self, op: Op, out: int) -> str:
        """(x - mean) / sqrt(mean((x - mean)**2) + eps) over the last dim: the centred tile is masked
        again (padding would hold -mean) before its squares are summed."""
        x, shape = f"s{op.inputs[0]}", self.shape(out)
        axis, n = len(shape) - 1, shape[-1]
        lines = self.lines_for(out)
        lines.append(f"s{out}_c = " + self.masked(out, f"{x} - tl.sum({x}, axis={axis}, keep_dims=True) / {n}"))
        var = f"tl.sum(s{out}_c * s{out}_c, axis={axis}, keep_dims=True) / {n}" + _plus_eps(op)
        return f"s{out}_c / tl.sqrt({var})"

    def lines_for(self, t: int) -> list[str]:
        if self.bg.tensors[t].after_accum:
            return self.after
        return self.before if t in self.invariant else self.loop

    def compute(self, op: Op) -> None:
        out = op.outputs[0]
        lines = self.lines_for(out)
        e = self.expr(op, out)
        if e == f"s{out}":  # concat wrote its own lines
            return
        lines.append(f"s{out} = {e}")

    def accumulate(self, op: Op, kind: AccumKind) -> None:
        """The loop adds whole tiles (x, or x*x for rms) in float32; the accumulator's own reduction
        over the last dim runs once after the loop, which gives the same sum since it is linear."""
        x, out = op.inputs[0], op.outputs[0]
        xs = self.shape(x)
        last = len(xs) - 1
        self.setup.append(f"acc{out} = tl.zeros({_shape_text(padded_shape(xs))}, dtype=tl.float32)  # {kind}")
        self.loop.append(f"acc{out} += s{x} * s{x}" if kind is OpKind.ACCUM_RMS else f"acc{out} += s{x}")
        n = self.bg.forloop * xs[-1]
        total = f"tl.sum(acc{out}, axis={last}, keep_dims=True)"
        match kind:
            case OpKind.ACCUM_NO_RED:
                final = f"acc{out}"
            case OpKind.ACCUM_SUM:
                final = total
            case OpKind.ACCUM_MEAN:
                final = f"{total} / {n}"
            case OpKind.ACCUM_RMS:
                final = f"tl.sqrt({total} / {n}{_plus_eps(op)})"
            case OpKind.ACCUM_REDTOX:
                rdx, pn = self.bg.rdx, padded(xs[-1])
                if padded(rdx) != rdx or pn % rdx:
                    raise CodegenError(
                        f"accum_redtox of {fmt(xs)} to reduction_dimx {rdx}: needs a power of two of at least {MIN_DOT}"
                    )
                folded = _shape_text((*padded_shape(xs[:-1]), pn // rdx, rdx))
                final = f"tl.sum(tl.reshape(acc{out}, {folded}), axis={last})"
            case _ as unreachable:
                assert_never(unreachable)
        self.after.append(f"s{out} = {final}")


def _plus_eps(op: Op) -> str:
    """` + eps` for a norm or accum_rms with an eps (its exact float through repr), else nothing."""
    eps = eps_of(op)
    return f" + {eps!r}" if eps else ""


def live_tensors(graph: BlockGraph | KernelGraph) -> set[int]:
    """The tensors some output depends on (a μGraph may carry ops whose results nothing reads)."""
    live: set[int] = set()
    for op in reversed(graph.ops):
        if op.kind is OpKind.OUTPUT or any(o in live for o in op.outputs):
            live.update(op.inputs)
            live.update(op.outputs)
    return live


def emit_kernel(
    bg: BlockGraph,
    name: str,
    sources: Sequence[str],
    comment: Sequence[str] = (),
    strides: Sequence[Shape] = (),
    *,
    tf32: bool = False,
    interpreted: bool = False,
) -> KernelSource:
    """The kernel of `bg`; `sources` names each input's device tensor and `comment` adds lines (both only
    in comments, through `inert`: a name holding a newline would otherwise end its comment and run the
    rest as code); `strides` gives the element strides of its inputs then its outputs (default: row-major);
    `tf32`: float32 tiles enter tl.dot as TF32 (faster, 10-bit mantissa) rather than as full float32;
    `interpreted`: for Triton's interpreter, whose tl.dot of bfloat16 tiles is wrong, they enter it as float32."""
    n_inputs = len(bg.sources)
    in_strides: list[Shape | None] = [*strides[:n_inputs]] or [None] * n_inputs
    out_strides: list[Shape | None] = [*strides[n_inputs:]] or [None] * len(bg.output_shapes)
    body = _Body(bg, name, tf32, interpreted)
    head = [
        f"# grid {list(bg.grid)} (tl.program_id per axis), for-loop range {bg.forloop}",
        *[f"# {inert(c)}" for c in comment],
    ]
    for a in range(3):
        if bg.grid[a] > 1:
            body.setup.append(f"pid_{AXES[a]} = tl.program_id({a})")
    live = live_tensors(bg)
    k_in = k_out = 0
    for op in bg.ops:
        match op.kind:
            case OpKind.INPUT:
                head.append(_load_input(body, op, k_in, sources[k_in], in_strides[k_in], live))
                k_in += 1
            case OpKind.OUTPUT:
                head.append(_store_output(body, op, k_out, out_strides[k_out]))
                k_out += 1
            case _ if op.outputs[0] not in live:
                head.append(f"# s{op.outputs[0]} = {op.kind}: reaches no output, not computed")
            case kind if kind in ACCUMULATORS:
                body.accumulate(op, kind)
            case _:
                if not bg.tensors[op.outputs[0]].after_accum and all(i in body.invariant for i in op.inputs):
                    body.invariant.add(op.outputs[0])
                body.compute(op)
    return KernelSource(name, bg.grid, _kernel_lines(body, head), body.scratch)


def _load_input(body: _Body, op: Op, k: int, source: str, strides: Shape | None, live: set[int]) -> str:
    """The loads of input `k` (once before the loop where its fmap is -1, else each iteration; none where
    no op reads it); its header comment line."""
    bg = body.bg
    out, src = op.outputs[0], bg.sources[k]
    imap, fmap = op.dims_attr("imap"), op.int_attr("fmap")
    tile = bg.tensors[out].shape
    acc = input_access(src.shape, tile, bg.grid, imap, fmap, bg.forloop, strides)
    comment = (
        f"# s{out} <- {inert(source)} {fmt(src.shape)}: imap {list(imap)}, fmap {fmap} -> tile "
        f"{fmt(tile)} (padded {fmt(padded_shape(tile))})"
        + (" per iteration" if fmap >= 0 else ", loaded once" if out in live else "")
        + ("" if out in live else ", read by no op: not loaded")
    )
    if out not in live:
        return comment
    start = "" if acc.base == "0" else f" + {acc.base}"
    body.setup.append(f"s{out}_ptrs = in{k}_ptr{start} + {acc.offsets}")
    m = body.mask_of(tile)
    opts = f", mask={m}, other=0.0" if m is not None else ""
    body.loaded.add(out)
    where = body.before if fmap < 0 else body.loop
    step = "" if fmap < 0 else f" + i * {acc.step}"
    where.append(f"s{out}h = tl.load(s{out}_ptrs{step}{opts})")
    if any(out in o.inputs and o.kind is not OpKind.MATMUL for o in bg.ops):
        where.append(f"s{out} = s{out}h.to(tl.float32)")  # fp16 straight into tl.dot, float32 elsewhere
    if fmap < 0:
        body.invariant.add(out)
    return comment


def _store_output(body: _Body, op: Op, k: int, strides: Shape | None) -> str:
    """The store of output `k` after the loop, where its omap puts the block's tile; its header comment line."""
    bg = body.bg
    x = op.inputs[0]
    omap = op.dims_attr("omap")
    dshape = bg.output_shapes[k]
    acc = output_access(dshape, bg.tensors[x].shape, omap, strides)
    m = body.mask_of(bg.tensors[x].shape)
    opts = f", mask={m}" if m is not None else ""
    start = "" if acc.base == "0" else f" + {acc.base}"
    value = narrowed(f"s{x}", bg.tensors[x].dtype, body.interpreted)
    body.after.append(f"tl.store(out{k}_ptr{start} + {acc.offsets}, {value}{opts})")
    return f"# out{k} {fmt(dshape)} <- s{x} {fmt(bg.tensors[x].shape)}: omap {list(omap)}"


def _kernel_lines(body: _Body, head: list[str]) -> list[str]:
    """The kernel's text: signature and header comments, the set-up and the loads before the loop, the
    for-loop, then what runs after it."""
    bg = body.bg
    n_in = sum(1 for op in bg.ops if op.kind is OpKind.INPUT)
    params = [f"in{k}_ptr" for k in range(n_in)] + [f"out{k}_ptr" for k in range(len(bg.output_shapes))]
    params += [f"scr{k}_ptr" for k in range(len(body.scratch))]
    lines = ["@triton.jit", f"def {body.name}({', '.join(params)}):", *[f"    {h}" for h in head]]
    lines += [f"    {s}" for s in body.setup + body.before]
    var = "i" if any("i * " in s for s in body.loop) else "_"
    lines.append(f"    for {var} in range({bg.forloop}):  # the for-loop")
    lines += [f"        {s}" for s in body.loop] or ["        pass"]
    lines.append("    # after the for-loop: accumulated results, the ops after accumulation, the stores")
    lines += [f"    {s}" for s in body.after]
    return lines


def narrowed(tile: str, dtype: DType, interpreted: bool) -> str:
    """A float32 tile in `dtype`, rounded to nearest even. Triton's interpreter truncates a float32
    value it converts to bfloat16 (half the values one ulp off, where a GPU rounds), so there the
    rounding is written out on the bits; NaN stays NaN."""
    if not (interpreted and dtype is DType.BFLOAT16):
        return f"{tile}.to({TL_TYPES[dtype]})"
    bits = f"{tile}.to(tl.uint32, bitcast=True)"
    rounded = f"(({bits} + 0x7FFF + (({bits} >> 16) & 1)) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)"
    return f"tl.where({tile} == {tile}, {rounded}, {tile}.to(tl.bfloat16))"


def kernel_problem(graph: KernelGraph) -> str | None:
    """Why the kernels of `graph`'s graph-defined ops cannot be written (None where they can): the
    ranking leaves such a μGraph out, as it does one that no layout fits, rather than choose what no
    module could run."""
    for k, op in enumerate(graph.ops):
        if op.block is None:
            continue
        try:
            emit_kernel(op.block, f"k{k}", [f"in{i}" for i in range(len(op.block.sources))])
        except CodegenError as e:
            return str(e)
    return None
