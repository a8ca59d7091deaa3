"""Abstract expressions (Mirage's Table 1): which inputs a tensor combines, and how, ignoring values.

Terms are immutable and hash-consed: building the same term twice returns the same object, so an
expression costs one dict lookup per op as the search adds ops, and equality is identity. The
operands of the commutative ops (add, mul) are kept sorted, so `add(a, b)` and `add(b, a)` are one
term. Each term carries its canonical s-expression (inputs named `v0, v1, ...` by reference-input
order; reduction degrees exact) and a digest of it, the same in every process and on every machine.

Rules, per op: input i → v_i; matmul(A, B) → (sum k (* A B)) with k = A's last dim; reduction over a
dim of size n → (sum n x) (n = 1 is x itself); rms_norm(x) → (/ x (rms n x)); square → (* x x);
mul_scalar → x (a constant factor changes no subexpression relation); exp, sqrt, silu, gelu, gelu_erf,
relu, clamp → the same unary term; concat → (concat D S a b), and matmul(concat(a, b), concat(c, d))
split at the same S along the contraction dim → (+ (sum S (* a c)) (sum k-S (* b d))), the lora
preset's concat-then-matmul macro. Block graphs are inlined: an input
is its device tensor's term; accumulators over F iterations of a last dim n give no_red → (sum F x),
sum and mean → (sum F·n x), rms → (rms F·n x), redtox → (sum F·n/rdx x).

A norm's eps tags its term: with eps ≠ 0, rms_norm and accum_rms give (rms n E x), E the IEEE-754 bits of
eps as an integer (exact, and distinct per eps), and the eps = 0 terms keep their text; layer_norm(x) →
(layer_norm n E x), an opaque function of x (E = 0 for eps = 0).
"""

from __future__ import annotations

import hashlib
import struct
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import assert_never

from mugraph.ir.families import BOUNDARY, PREDEFINED
from mugraph.ir.graph import BlockGraph, KernelGraph, Op, eps_of
from mugraph.ir.types import ACCUMULATORS, AccumKind, OpKind


class Head:
    """Term heads, as they appear in s-expressions."""

    VAR = "v"
    ADD = "+"
    MUL = "*"
    DIV = "/"
    SUM = "sum"
    RMS = "rms"
    EXP = "exp"
    SQRT = "sqrt"
    SILU = "silu"
    GELU = "gelu"
    GELU_ERF = "gelu_erf"
    RELU = "relu"
    CLAMP = "clamp"
    CONCAT = "concat"
    LAYER_NORM = "layer_norm"


COMMUTATIVE = frozenset({Head.ADD, Head.MUL})
UNARY_HEADS = {
    OpKind.EXP: Head.EXP,
    OpKind.SQRT: Head.SQRT,
    OpKind.SILU: Head.SILU,
    OpKind.GELU: Head.GELU,
    OpKind.GELU_ERF: Head.GELU_ERF,
    OpKind.RELU: Head.RELU,
    OpKind.CLAMP: Head.CLAMP,
}


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Expr:
    """A hash-consed term. Build terms with the functions below, never with the constructor."""

    head: str
    args: tuple[Expr, ...]
    param: tuple[int, ...]  # (input index,) for VAR, (degree,) for SUM, (degree[, eps bits]) for RMS, see concat
    sexpr: str = field(repr=False)
    # Ops in the term as a tree (a shared subterm counted where it occurs): how much of a program a
    # tensor computes, which the search's cost order reads to try the furthest-reaching ops first.
    size: int = field(default=1, repr=False)

    def __str__(self) -> str:
        return self.sexpr

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.sexpr.encode("ascii")).hexdigest()[:32]


_TABLE: weakref.WeakValueDictionary[str, Expr] = weakref.WeakValueDictionary()


# The same table keyed by identity of the (hash-consed) arguments: finding a known term costs no
# string building. A live entry's value holds its arguments, so their ids cannot be reused.
_BY_ID: weakref.WeakValueDictionary[tuple[object, ...], Expr] = weakref.WeakValueDictionary()


# Read through the table's own dict of weak references: WeakValueDictionary.get is a Python-level
# method, and a search looks up about one term per listed child. Outside iteration (never done
# here) a dead reference is removed at once, so a stored reference that returns None only means
# the term died.
_BY_ID_REFS: dict[tuple[object, ...], weakref.ref[Expr]] = _BY_ID.data  # type: ignore[attr-defined]


def _make(head: str, args: tuple[Expr, ...], param: tuple[int, ...] = ()) -> Expr:
    key = (head, param, *map(id, args))
    ref = _BY_ID_REFS.get(key)
    if ref is not None and (hit := ref()) is not None:
        return hit
    found = _make_slow(head, args, param)
    _BY_ID[key] = found
    return found


def _make_slow(head: str, args: tuple[Expr, ...], param: tuple[int, ...]) -> Expr:
    if head in COMMUTATIVE:
        args = tuple(sorted(args, key=lambda e: e.sexpr))
    if head == Head.VAR:
        text = f"v{param[0]}"
    else:
        text = "(" + " ".join([head, *map(str, param), *(a.sexpr for a in args)]) + ")"
    found = _TABLE.get(text)
    if found is None:
        found = Expr(head, args, param, text, 1 + sum([a.size for a in args]))
        _TABLE[text] = found
    return found


def var(i: int) -> Expr:
    return _make(Head.VAR, (), (i,))


def add(a: Expr, b: Expr) -> Expr:
    return _make(Head.ADD, (a, b))


def mul(a: Expr, b: Expr) -> Expr:
    return _make(Head.MUL, (a, b))


def div(a: Expr, b: Expr) -> Expr:
    return _make(Head.DIV, (a, b))


def red(n: int, x: Expr) -> Expr:
    """Sum of n terms; nested sums merge (their degrees multiply)."""
    if n == 1:
        return x
    if x.head == Head.SUM:
        return _make(Head.SUM, x.args, (n * x.param[0],))
    return _make(Head.SUM, (x,), (n,))


def eps_bits(eps: float) -> int:
    """eps as an exact integer tag: its IEEE-754 bits (0 for eps = 0)."""
    return int(struct.unpack("<q", struct.pack("<d", float(eps)))[0]) if eps else 0


def rms(n: int, x: Expr, eps: float = 0.0) -> Expr:
    """sqrt(mean of n terms of x² + eps); eps = 0 keeps the term Mirage's (rms n x)."""
    return _make(Head.RMS, (x,), (n, eps_bits(eps)) if eps else (n,))


def layer_norm(n: int, x: Expr, eps: float = 0.0) -> Expr:
    return _make(Head.LAYER_NORM, (x,), (n, eps_bits(eps)))


def unary(head: str, x: Expr) -> Expr:
    return _make(head, (x,))


def concat(a: Expr, b: Expr, dim_from_end: int, size_a: int) -> Expr:
    """(concat D S a b): b follows a along the dim D from the end; a's size there is S."""
    return _make(Head.CONCAT, (a, b), (dim_from_end, size_a))


def matmul(a: Expr, b: Expr, k: int) -> Expr:
    """(sum k (* a b)); a product of two concatenations split at the same place along the
    contraction dim is the sum of the two partial products."""
    if (
        a.head == Head.CONCAT
        and b.head == Head.CONCAT
        and a.param[0] == 1
        and b.param[0] == 2
        and a.param[1] == b.param[1]
    ):
        ka = a.param[1]
        return add(red(ka, mul(a.args[0], b.args[0])), red(k - ka, mul(a.args[1], b.args[1])))
    return red(k, mul(a, b))


def op_expr(op: Op, args: Sequence[Expr], shapes: Sequence[tuple[int, ...]]) -> Expr:
    """The term of a computing op's output from its operands' terms and shapes. A match tries its
    cases in order: the kinds the search meets here most (its kernel reductions and rms_norms) come
    first."""
    k = op.kind
    if k not in PREDEFINED:
        raise ValueError(
            f"{k} has no rule in op_expr: the walks give inputs, outputs and graph-defined "
            "ops their terms, accumulator_expr the accumulators'"
        )
    match k:
        case OpKind.MATMUL:
            return matmul(args[0], args[1], shapes[0][-1])
        case OpKind.ADD:
            return add(args[0], args[1])
        case OpKind.MUL:
            return mul(args[0], args[1])
        case OpKind.DIV:
            return div(args[0], args[1])
        case OpKind.REDUCTION:
            return red(shapes[0][op.int_attr("dim")], args[0])
        case OpKind.RMS_NORM:
            return div(args[0], rms(shapes[0][-1], args[0], eps_of(op)))
        case OpKind.LAYER_NORM:
            return layer_norm(shapes[0][-1], args[0], eps_of(op))
        case OpKind.SQUARE:
            return mul(args[0], args[0])
        case OpKind.MUL_SCALAR:
            return args[0]
        case OpKind.EXP | OpKind.SQRT | OpKind.SILU | OpKind.GELU | OpKind.GELU_ERF | OpKind.RELU | OpKind.CLAMP:
            return unary(UNARY_HEADS[k], args[0])
        case OpKind.CONCAT:
            dim = op.int_attr("dim")
            return concat(args[0], args[1], len(shapes[0]) - dim, shapes[0][dim])
        case _ as unreachable:
            assert_never(unreachable)


def accumulator_expr(kind: AccumKind, x: Expr, shape: Sequence[int], forloop: int, rdx: int, eps: float = 0.0) -> Expr:
    """The term of an accumulator's output over `forloop` iterations of an operand of `shape`
    (`eps`: accum_rms's)."""
    match kind:
        case OpKind.ACCUM_NO_RED:
            return red(forloop, x)
        case OpKind.ACCUM_SUM | OpKind.ACCUM_MEAN:
            return red(forloop * shape[-1], x)
        case OpKind.ACCUM_RMS:
            return rms(forloop * shape[-1], x, eps)
        case OpKind.ACCUM_REDTOX:
            return red(forloop * shape[-1] // rdx, x)
        case _ as unreachable:
            assert_never(unreachable)


def block_exprs(bg: BlockGraph, inputs: Sequence[Expr]) -> tuple[dict[int, Expr], list[Expr]]:
    """Terms of a block graph's tensors (by index) and of its outputs, from its inputs' terms."""
    terms: dict[int, Expr] = {}
    outs: list[Expr] = []
    n_in = 0
    for op in bg.ops:
        match op.kind:
            case OpKind.INPUT:
                terms[op.outputs[0]] = inputs[n_in]
                n_in += 1
            case OpKind.OUTPUT:
                outs.append(terms[op.inputs[0]])
            case kind if kind in ACCUMULATORS:
                x = op.inputs[0]
                terms[op.outputs[0]] = accumulator_expr(
                    kind, terms[x], bg.tensors[x].shape, bg.forloop, bg.rdx, eps_of(op)
                )
            case _:
                shapes = [bg.tensors[i].shape for i in op.inputs]
                terms[op.outputs[0]] = op_expr(op, [terms[i] for i in op.inputs], shapes)
    return terms, outs


def _walk(graph: KernelGraph) -> tuple[dict[int, Expr], list[dict[int, Expr]]]:
    """Terms of every device tensor, and of every block tensor of each graph-defined op in order."""
    terms: dict[int, Expr] = {}
    blocks: list[dict[int, Expr]] = []
    n_in = 0
    for op in graph.ops:
        match op.kind:
            case OpKind.INPUT:
                terms[op.outputs[0]] = var(n_in)
                n_in += 1
            case OpKind.OUTPUT:
                pass
            case OpKind.CUSTOMIZED:
                assert op.block is not None
                bterms, outs = block_exprs(op.block, [terms[i] for i in op.inputs])
                blocks.append(bterms)
                terms.update(zip(op.outputs, outs, strict=True))
            case _:
                shapes = [graph.tensors[i].shape for i in op.inputs]
                terms[op.outputs[0]] = op_expr(op, [terms[i] for i in op.inputs], shapes)
    return terms, blocks


def graph_exprs(graph: KernelGraph) -> dict[int, Expr]:
    """Terms of every device tensor of a kernel graph, graph-defined ops inlined."""
    return _walk(graph)[0]


def output_exprs(graph: KernelGraph) -> list[Expr]:
    terms = graph_exprs(graph)
    return [terms[t.index] for t in graph.output_tensors]


def labelled_exprs(graph: KernelGraph) -> list[tuple[str, Expr]]:
    """Every computed tensor's term, labelled `t5` (kernel) or `K1.s4` (block graph of the first
    graph-defined op), in op order: what the search would ask the oracle about."""
    terms, blocks = _walk(graph)
    out: list[tuple[str, Expr]] = []
    n_block = 0
    for op in graph.ops:
        match op.kind:
            case k if k in BOUNDARY:
                pass
            case OpKind.CUSTOMIZED:
                assert op.block is not None
                bterms = blocks[n_block]
                n_block += 1
                out += [
                    (f"K{n_block}.s{o}", bterms[o])
                    for bop in op.block.ops
                    if bop.kind not in BOUNDARY
                    for o in bop.outputs
                ]
            case _:
                out += [(f"t{o}", terms[o]) for o in op.outputs]
    return out


def parse(text: str) -> Expr:
    """The term an s-expression (`Expr.sexpr`) names: verdicts and memo keys are keyed by that text,
    so a logged query can be asked again."""
    tokens = text.replace("(", " ( ").replace(")", " ) ").split()
    pos = 0

    def term() -> Expr:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok != "(":
            if not (tok.startswith("v") and tok[1:].isdigit()):
                raise ValueError(f"not a term: {tok!r} in {text!r}")
            return var(int(tok[1:]))
        head = tokens[pos]
        pos += 1
        params: list[int] = []
        while tokens[pos].lstrip("-").isdigit():
            params.append(int(tokens[pos]))
            pos += 1
        args: list[Expr] = []
        while tokens[pos] != ")":
            args.append(term())
        pos += 1
        return _make(head, tuple(args), tuple(params))

    out = term()
    if pos != len(tokens) or out.sexpr != " ".join(text.split()):
        raise ValueError(f"not one canonical term: {text!r}")
    return out
