"""The lora preset's concat-then-matmul macro: its children listed as entries, made when kept.

The macro reads four distinct block tensors (a, b, c, d) and makes matmul(concat(a, b, last dim),
concat(c, d, dim -2)); it is one op for the canonical order and the oracle judges only the
product's term, as in Mirage. Which quadruples are well shaped, and the shapes they make, depend
only on the block tensors' shapes and after-accum flags (the layout), so they are worked out once
per layout; a node lists those ranked above its last op that fit in shared memory, each with its
terms (memoised: the same four terms meet again under every grid, map and for-loop range). A
child's state is made only when the oracle keeps it: on lora's whole space most macro children are
pruned, and making each one's state up front was over half of a worker's time.
"""

from __future__ import annotations

import functools
import itertools
from itertools import islice
from typing import Final

from mugraph.ir.types import OpKind, Shape
from mugraph.stages.prune import expr as E
from mugraph.stages.search.op_results import fast_shape
from mugraph.stages.search.state import (
    CONCAT_MATMUL_ORDER,
    OpenBlock,
    OpSpec,
    State,
    TInfo,
    bump,
    first_above,
    shape_nbytes,
)

__all__ = ["MacroEntry", "macro_child", "macro_entries", "macro_label"]

# One macro a block graph's tensors admit: (operands (a, b, c, d), shared memory it adds, the
# product's term alone (what the oracle judges), the shapes of the left concatenation, the right
# one and the product, and the two concatenations' terms). A plain tuple read at the named
# positions, as op-table entries are (state.Entry); its tensors are made with its child's state.
MacroEntry = tuple[tuple[int, int, int, int], int, tuple[E.Expr], "MacroOperands", E.Expr, E.Expr]
MACRO_NEW: Final = 2  # the position `ChildList` reads


def macro_entries(b: OpenBlock, room: int) -> list[MacroEntry]:
    """The macros `b` may add: quadruples ranked above its last op whose three tensors fit in
    `room` bytes of shared memory, in operand order."""
    tensors = b.tensors
    keys, plan = _plan(tuple((t.shape, t.after_accum) for t in tensors))
    out: list[MacroEntry] = []
    add = out.append
    exprs = [t.expr for t in tensors]
    for item in islice(plan, first_above(keys, CONCAT_MATMUL_ORDER, b.last), None):
        ins, left, _, _, nbytes, size_a, size_c = item
        if nbytes > room:
            continue
        a, bb, c, d = ins
        lterm, rterm, mterm = _terms(exprs[a], exprs[bb], exprs[c], exprs[d], size_a, size_c, left[-1])
        add((ins, nbytes, (mterm,), item, lterm, rterm))
    return out


# A macro's three terms by its operands' terms (by identity: terms are hash-consed) and sizes. The
# same four terms meet again and again: a block graph's inputs have the kernel tensors' terms
# whatever the grid, maps and for-loop range, and so do most ops over them. A value holds its
# operands, so their ids stay theirs while it lives; the table is emptied when it grows too large.
_TERMS: dict[tuple[int, ...], tuple[E.Expr, ...]] = {}
_TERMS_MAX = 1 << 17


def _terms(
    a: E.Expr, b: E.Expr, c: E.Expr, d: E.Expr, size_a: int, size_c: int, k: int
) -> tuple[E.Expr, E.Expr, E.Expr]:
    """The left concatenation's, the right one's and the product's terms."""
    key = (id(a), id(b), id(c), id(d), size_a, size_c, k)
    hit = _TERMS.get(key)
    if hit is not None:
        return hit[4], hit[5], hit[6]
    left = E.concat(a, b, 1, size_a)
    right = E.concat(c, d, 2, size_c)
    product = E.matmul(left, right, k)
    if len(_TERMS) >= _TERMS_MAX:
        _TERMS.clear()
    _TERMS[key] = (a, b, c, d, left, right, product)
    return left, right, product


def macro_label(ins: tuple[int, ...]) -> str:
    return f"concat_matmul({','.join(map(str, ins))})"


def macro_child(s: State, b: OpenBlock, e: MacroEntry) -> State:
    """The state after the macro of entry `e`: its three tensors appended (the two concatenations
    consumed by the product, which dangles)."""
    ins, nbytes, new, (_, left, right, prod_shape, _, _, _), lterm, rterm = e
    flag = b.tensors[ins[0]].after_accum
    lt, rt, mt = TInfo(left, lterm, flag), TInfo(right, rterm, flag), TInfo(prod_shape, new[0], flag)
    uses = bump(b.uses, ins, 3)[: len(b.tensors)] + (1, 1, 0)
    nb = b.grown(OpSpec(OpKind.CONCAT, ins), (lt, rt, mt), uses, (ins, CONCAT_MATMUL_ORDER), b.smem + nbytes, True)
    return State(s.tensors, s.uses, s.ops, s.last, s.dmem, nb, new, macro_label(ins), s.table)


# A quadruple of a layout's plan: (operands, the left concatenation's, the right one's and the
# product's shapes, the shared memory of the three, a's size along the last dim, c's along dim -2).
MacroOperands = tuple[tuple[int, int, int, int], Shape, Shape, Shape, int, int, int]


@functools.lru_cache(maxsize=1 << 14)
def _plan(layout: tuple[tuple[Shape, bool], ...]) -> tuple[list[tuple[int, ...]], tuple[MacroOperands, ...]]:
    """Every (a, b, c, d) of distinct block tensors whose concat-then-matmul is well shaped, with
    what its entry needs of the shapes (`MacroOperands`), sorted by operands. Worked out once per
    layout (block tensors' shapes and after-accum flags); in lora's costliest tasks about half the
    block nodes bring a layout not met before, so the cache halves this work. The right pairs are
    grouped by what the matmul needs of them (rank, batch dims, contraction length, flag), so a
    left pair meets only the rights it can multiply."""
    rights: dict[tuple[object, ...], list[tuple[int, int, Shape]]] = {}
    for c, d, right in _concat_pairs(layout, 2):
        if len(right) >= 2:
            rights.setdefault((len(right), right[:-2], right[-2], layout[c][1]), []).append((c, d, right))
    plan: list[MacroOperands] = []
    for a, bb, left in _concat_pairs(layout, 1):
        for c, d, right in rights.get((len(left), left[:-2], left[-1], layout[a][1]), ()):
            if len({a, bb, c, d}) < 4:
                continue
            prod_shape = fast_shape(OpKind.MATMUL, left, right)
            if prod_shape is not None:
                nbytes = shape_nbytes(left) + shape_nbytes(right) + shape_nbytes(prod_shape)
                size_a, size_c = layout[a][0][-1], layout[c][0][-2]
                plan.append(((a, bb, c, d), left, right, prod_shape, nbytes, size_a, size_c))
    return [p[0] for p in plan], tuple(plan)


def _concat_pairs(layout: tuple[tuple[Shape, bool], ...], dim_from_end: int) -> list[tuple[int, int, Shape]]:
    """Ordered pairs (i, j), sorted, of block tensors (by shape and after-accum flag) that
    concatenate along the dim `dim_from_end` from the end, with the concatenation's shape.
    Tensors are grouped by everything but that dim, so only matching pairs are formed."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, (x, flag) in enumerate(layout):
        d = len(x) - dim_from_end
        if d >= 0:
            groups.setdefault((len(x), flag, x[:d], x[d + 1 :]), []).append(i)
    found = []
    for members in groups.values():
        for i, j in itertools.permutations(members, 2):
            x, y = layout[i][0], layout[j][0]
            d = len(x) - dim_from_end
            found.append((i, j, x[:d] + (x[d] + y[d],) + x[d + 1 :]))
    found.sort()
    return found
