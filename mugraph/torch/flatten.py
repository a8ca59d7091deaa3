"""Which ops on tensors of 3 or more dims are lowered on 2-d forms ([B, S, D] as [B·S, D]).

The IR has no reshape, so a value the program holds on its 2-d form can be read only by ops that
read it so too; an op needing its dims (a batched matmul, a product broadcast over some leading dims
only, as rotary embeddings are) would have to leave it to torch. So the choice is made for the whole
graph before lowering: an op is *row-wise* where it acts on each row of its last dim alone and every
operand has a 2-d form; a row-wise op is lowered on 2-d forms unless a lowerable op that is not
row-wise reads its result, and the refusal spreads back through the row-wise ops feeding it. A
linear layer on [B, S, D] then reads 2-d forms, and the element-wise ops between two of them do too.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Mapping, Sequence
from math import prod
from typing import Any

import torch
from torch import fx

from mugraph.torch.composite import Composite
from mugraph.torch.lower_operands import bind, flat_shape, meta

aten = torch.ops.aten

ELEMENTWISE = frozenset(
    {
        aten.add.Tensor,
        aten.add.Scalar,
        aten.sub.Tensor,
        aten.sub.Scalar,
        aten.rsub.Scalar,
        aten.mul.Tensor,
        aten.mul.Scalar,
        aten.div.Tensor,
        aten.div.Scalar,
        aten.neg.default,
        aten.exp.default,
        aten.silu.default,
        aten.relu.default,
        aten.sqrt.default,
        aten.square.default,
        aten.rsqrt.default,
        aten.reciprocal.default,
        aten.gelu.default,
        aten.pow.Tensor_Scalar,
        aten.clamp.default,
        aten.clone.default,
    }
)


VIEWS = frozenset({aten.view.default, aten.reshape.default, aten._unsafe_view.default})
SPLITS = frozenset({aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default})
TRANSPOSES = frozenset({aten.t.default, aten.permute.default, aten.transpose.int})
# ops with a lowering that are glue wherever they read a lowered value (not held flat, for a view)
GLUE_READS = VIEWS | TRANSPOSES


def split_linear(split: Any) -> fx.Node | None:
    """The linear layer whose output `split` splits along its last dim (`chunk`, `split`,
    `split_with_sizes`); None for any other value."""
    if not isinstance(split, fx.Node) or split.target not in SPLITS or not split.args:
        return None
    lin, shape = split.args[0], _shape(split.args[0]) if isinstance(split.args[0], fx.Node) else None
    if not isinstance(lin, fx.Node) or lin.target is not aten.linear.default or not shape:
        return None
    dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
    return lin if isinstance(dim, int) and dim % len(shape) == len(shape) - 1 else None


def einsum_matmul(node: fx.Node) -> tuple[fx.Node, fx.Node, bool] | None:
    """(a, b, b transposed) where `node` is an einsum that is a matmul of `a` [.., k] and a matrix `b`
    [k, n] (or [n, k]: transposed): `bsd,df->bsf`, `...d,fd->...f`, `ij,jk->ik`; None otherwise."""
    if node.target is not aten.einsum.default or len(node.args) < 2:
        return None
    equation, operands = node.args[0], node.args[1]
    if not isinstance(equation, str) or not isinstance(operands, list | tuple) or len(operands) != 2:
        return None
    lhs, arrow, out = equation.replace(" ", "").partition("->")
    parts = lhs.split(",")
    a_node, b_node = operands
    if not arrow or len(parts) != 2 or not isinstance(a_node, fx.Node) or not isinstance(b_node, fx.Node):
        return None
    a, b = parts
    letters = a.replace("...", "")
    if len(b) != 2 or not letters or len(set(letters)) != len(letters) or a.endswith("."):
        return None
    k = a[-1]
    n = b.replace(k, "")
    if b.count(k) != 1 or len(n) != 1 or n in a or out != a[:-1] + n:
        return None
    return a_node, b_node, b == n + k


def _shape(a: fx.Node) -> tuple[int, ...] | None:
    val = meta(a)
    return tuple(int(d) for d in val.shape) if isinstance(val, torch.Tensor) else None


def _last_dim_only(node: fx.Node, rank: int) -> bool:
    b = bind(node)
    dims = b.get("dim")
    dims = [dims] if isinstance(dims, int) else dims
    return isinstance(dims, list | tuple) and len(dims) == 1 and isinstance(dims[0], int) and dims[0] % rank == rank - 1


def row_operands(node: fx.Node, composite: Composite | None = None) -> list[fx.Node] | None:
    """The tensor operands `node` reads row by row, where it is a row-wise op on 3 or more dims whose
    operands all have 2-d forms; else None."""
    out = _shape(node)
    if out is None or len(out) < 3:
        return None
    t = node.target
    if t in VIEWS:  # a view keeping the 2-d form: its operand read as it is held
        src = node.args[0]
        ins = _shape(src) if isinstance(src, fx.Node) else None
        if ins is None or len(ins) < 2 or (prod(ins[:-1]), ins[-1]) != (prod(out[:-1]), out[-1]):
            return None
        assert isinstance(src, fx.Node)
        return [src]
    if composite is not None:
        ops = [a for a in (composite.x, composite.weight, composite.bias) if a is not None]
    elif t in ELEMENTWISE:
        ops = list(node.all_input_nodes)
    elif t is aten.linear.default:
        b = bind(node)
        ops = [a for a in (b["input"], b.get("bias")) if isinstance(a, fx.Node)]
    elif t is operator.getitem:  # a piece of a linear's output split along the last dim: that linear
        lin = split_linear(node.args[0])
        if lin is None:
            return None
        x = bind(lin)["input"]
        ops = [x] if isinstance(x, fx.Node) else []
    elif (mm := einsum_matmul(node)) is not None:
        ops = [mm[0]]
    elif t is aten.matmul.default:
        rhs = _shape(node.args[1]) if isinstance(node.args[1], fx.Node) else None
        if rhs is None or len(rhs) < 2 or any(d != 1 for d in rhs[:-2]) or not isinstance(node.args[0], fx.Node):
            return None
        ops = [node.args[0]]
    elif t in (aten.sum.dim_IntList, aten.mean.dim):
        if not _last_dim_only(node, len(out)) or not isinstance(node.args[0], fx.Node):
            return None
        ops = [node.args[0]]
    elif t is aten.cat.default:
        b = bind(node)
        parts, dim = b["tensors"], b.get("dim", 0)
        if not isinstance(parts, list | tuple) or not isinstance(dim, int) or dim % len(out) != len(out) - 1:
            return None
        ops = [p for p in parts if isinstance(p, fx.Node)]
        rows = prod(out[:-1])
        if any((s := _shape(p)) is None or flat_shape(s, out) != (rows, s[-1]) for p in ops):
            return None  # cat does not broadcast a part over the rows
    else:
        return None
    shapes = [_shape(a) for a in ops]
    if any(s is None or flat_shape(s, out) is None for s in shapes):
        return None
    return ops


def held_flat(nodes: Sequence[fx.Node], norms: Mapping[str, Composite], lowerable: Collection[object]) -> set[str]:
    """The nodes whose ops are lowered on 2-d forms: row-wise ones that no lowerable op needing the
    dims reads (`lowerable`: the ATen ops with a lowering; a composite's root, a norm or a written
    activation, counts as one)."""
    part_of = {name: root for root, n in norms.items() for name in n.nodes if name != root}
    by_name = {n.name: n for n in nodes}
    flat = {
        n.name
        for n in nodes
        if n.name not in part_of and row_operands(n, norms.get(n.name)) is not None  # a piece is its norm's
    }

    def readers(name: str) -> set[str]:
        out = {part_of.get(u.name, u.name) for u in by_name[name].users}
        return {r for r in out if r != part_of.get(name, name)}

    def needs_dims(reader: str) -> bool:
        node = by_name[reader]
        # a view not held flat, or a transpose, of a lowered value is glue: it reads the torch value
        return reader not in flat and (reader in norms or (node.target in lowerable and node.target not in GLUE_READS))

    changed = True
    while changed:
        changed = False
        for name in sorted(flat):
            if any(needs_dims(r) for r in readers(name)):
                flat.discard(name)
                changed = True
    return flat
