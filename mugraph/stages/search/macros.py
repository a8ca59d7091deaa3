"""The lora preset's concat-then-matmul macro: its children listed as entries, made when kept.

The macro reads four distinct block tensors (a, b, c, d) and makes matmul(concat(a, b, last dim),
concat(c, d, dim -2)); it is one op for the canonical order and the oracle judges only the
product's term, as in Mirage. Which quadruples are well shaped, the shapes they make and their
terms depend only on the block tensors, and a child graph holds its parent's tensors plus new ones;
so, as the op tables (`op_tables`), a child's macro table is its parent's with the quadruples added
that read a new tensor, each with its terms (memoised: the same four terms meet again under every
grid, map and for-loop range). A node lists those ranked above its last op that fit in shared
memory. A child's state is made only when the oracle keeps it: on lora's whole space most macro
children are pruned, and making each one's state up front was over half of a worker's time.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice

from mugraph.ir.types import OpKind, Shape
from mugraph.stages.prune import expr as E
from mugraph.stages.search.state import (
    CONCAT_MATMUL_ORDER,
    MacroEntry,
    MacroOperands,
    MacroTable,
    OpenBlock,
    OpSpec,
    Rank,
    State,
    TInfo,
    bump,
    first_above,
    shape_nbytes,
)

__all__ = [
    "MacroEntry",
    "MacroOperands",
    "macro_child",
    "macro_entries",
    "macro_grown",
    "macro_label",
    "macro_new",
    "macro_table",
    "macro_uses",
    "table_entries",
]


def macro_entries(b: OpenBlock, room: int) -> list[MacroEntry]:
    """The macros `b` may add: quadruples ranked above its last op whose three tensors fit in
    `room` bytes of shared memory, in operand order."""
    return table_entries(macro_table(b, room), b, room)


def table_entries(t: MacroTable, b: OpenBlock, room: int) -> list[MacroEntry]:
    """The entries of the macro table `t` that `b` lists: ranked above its last op and fitting in
    `room` bytes (`t` may lack `b`'s newest tensor; then these are only those over the others)."""
    keys, entries = t.keys, t.entries
    start = first_above(keys, CONCAT_MATMUL_ORDER, b.last)
    if start == len(keys):
        return []
    if t.big <= room:
        return entries[start:] if start else entries
    return [e for e in islice(entries, start, None) if e[1] <= room]


def macro_table(b: OpenBlock, room: int) -> MacroTable:
    """The macros over `b`'s tensors, extending the table it inherited from its parent graph.
    Only `b` and the graphs grown from it read the table, and their last ops rank ever higher and
    their shared memory only grows, so a quadruple it adds that ranks below `b`'s last op, or
    needs more than `room` bytes, is left out: no node reading the table could list it."""
    t = b.macros
    if t is None or t.n < len(b.tensors):
        t = b.macros = _extend(t, b.tensors, b.last, room)
    return t


_Groups = dict[tuple[object, ...], tuple[int, ...]]
_Pairs = dict[tuple[object, ...], tuple[tuple[int, int, Shape], ...]]


def _extend(base: MacroTable | None, tensors: Sequence[TInfo], last: Rank, room: int) -> MacroTable:
    """The table over `tensors`, extending `base` (over a prefix of them) with the quadruples that
    read a tensor it does not have. Tensors concatenate along a dim when all else (rank, other
    dims, after-accum flag) agrees, so each new tensor pairs only with the members of its group;
    a left pair meets only the right pairs the matmul can take (by rank, batch dims, contraction
    length and flag)."""
    n = len(tensors)
    if base is None:
        start, groups_l, groups_r, lefts, rights = 0, {}, {}, {}, {}
        old_lefts: _Pairs = {}
    else:
        start = base.n
        groups_l, groups_r = dict(base.groups[0]), dict(base.groups[1])
        old_lefts = lefts = base.lefts
        rights = base.rights
    new_lefts: list[tuple[int, int, Shape]] = []
    new_rights: list[tuple[int, int, Shape]] = []
    for i in range(start, n):
        t = tensors[i]
        x, flag, rank = t.shape, t.after_accum, len(t.shape)
        if rank >= 1:  # along the last dim
            key: tuple[object, ...] = (rank, flag, x[:-1])
            members = groups_l.get(key, ())
            for m in members:
                y = tensors[m].shape
                new_lefts.append((m, i, y[:-1] + (y[-1] + x[-1],)))
                new_lefts.append((i, m, x[:-1] + (x[-1] + y[-1],)))
            groups_l[key] = members + (i,)
        if rank >= 2:  # along dim -2
            key = (rank, flag, x[:-2], x[-1])
            members = groups_r.get(key, ())
            for m in members:
                y = tensors[m].shape
                new_rights.append((m, i, y[:-2] + (y[-2] + x[-2], y[-1])))
                new_rights.append((i, m, x[:-2] + (x[-2] + y[-2], x[-1])))
            groups_r[key] = members + (i,)
    found: list[MacroEntry] = []
    above = _above(last)
    if new_rights and base is not None:  # the parent's are shared, never changed
        rights = dict(rights)
    for c, d, right in new_rights:
        key = (len(right), right[:-2], right[-2], tensors[c].after_accum)
        rights[key] = rights.get(key, ()) + ((c, d, right),)
        for a, bb, left in old_lefts.get(key, ()):
            if c != a and c != bb and d != a and d != bb and (ins := (a, bb, c, d)) >= above:
                _add(found, tensors, ins, left, right, room)
    if new_lefts and base is not None:
        lefts = dict(lefts)
    for a, bb, left in new_lefts:
        key = (len(left), left[:-2], left[-1], tensors[a].after_accum)
        lefts[key] = lefts.get(key, ()) + ((a, bb, left),)
        for c, d, right in rights.get(key, ()):
            if c != a and c != bb and d != a and d != bb and (ins := (a, bb, c, d)) >= above:
                _add(found, tensors, ins, left, right, room)
    if base is not None and not found:
        return MacroTable(n, (groups_l, groups_r), lefts, rights, base.keys, base.entries, base.big)
    big = max([e[1] for e in found], default=0)
    found.sort()
    if base is None:
        entries = found
    else:  # operand tuples are unique, so entries compare on them: the two sorted runs merge
        entries = sorted(base.entries + found)
        big = max(big, base.big)
    keys: list[tuple[int, ...]] = [e[0] for e in entries]
    return MacroTable(n, (groups_l, groups_r), lefts, rights, keys, entries, big)


def _above(last: Rank) -> tuple[int, ...]:
    """The least operand tuple whose macro ranks above `last` (the macro ranks after every single
    op over the same tuple, and after no other macro over it)."""
    last_ins, last_order = last
    return last_ins if last_order < CONCAT_MATMUL_ORDER else last_ins + (-1,)


def _add(
    found: list[MacroEntry],
    tensors: Sequence[TInfo],
    ins: tuple[int, int, int, int],
    left: Shape,
    right: Shape,
    room: int,
) -> None:
    """Adds the entry of the macro over `ins`, whose concatenations have shapes `left` and `right`
    (the product is well shaped: the pairs met on what the matmul needs of them), if it fits in
    `room` bytes."""
    prod_shape = left[:-1] + (right[-1],)
    nbytes = shape_nbytes(left) + shape_nbytes(right) + shape_nbytes(prod_shape)
    if nbytes > room:
        return
    size_a, size_c = tensors[ins[0]].shape[-1], tensors[ins[2]].shape[-2]
    found.append((ins, nbytes, (ins, left, right, prod_shape, nbytes, size_a, size_c)))


def macro_terms(tensors: Sequence[TInfo], e: MacroEntry) -> tuple[E.Expr, E.Expr, E.Expr]:
    """The left concatenation's, the right one's and the product's terms of the macro `e` over
    these block tensors."""
    (a, b, c, d), _, (_, left, _, _, _, size_a, size_c) = e
    return _terms(tensors[a].expr, tensors[b].expr, tensors[c].expr, tensors[d].expr, size_a, size_c, left[-1])


def macro_new(tensors: Sequence[TInfo], e: MacroEntry) -> tuple[E.Expr]:
    """The new terms of the macro `e`'s child: the product's alone (what the oracle judges)."""
    return (macro_terms(tensors, e)[2],)


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
    nb = macro_grown(b, e, macro_uses(b.uses, e[0]))
    return State(s.tensors, s.uses, s.ops, s.last, s.dmem, nb, (nb.tensors[-1].expr,), macro_label(e[0]), s.table)


def macro_uses(uses: tuple[int, ...], ins: tuple[int, int, int, int]) -> tuple[int, ...]:
    """A block graph's consumer counts after the macro reading `ins`: the two concatenations are
    read by the product, which dangles."""
    return bump(uses, ins, 3)[: len(uses)] + (1, 1, 0)


def macro_grown(b: OpenBlock, e: MacroEntry, uses: tuple[int, ...]) -> OpenBlock:
    """The block graph `b` with the macro of entry `e` added (`uses`: `macro_uses` of it)."""
    ins, nbytes, (_, left, right, prod_shape, _, _, _) = e
    lterm, rterm, mterm = macro_terms(b.tensors, e)
    flag = b.tensors[ins[0]].after_accum
    lt, rt, mt = TInfo(left, lterm, flag), TInfo(right, rterm, flag), TInfo(prod_shape, mterm, flag)
    return b.grown(OpSpec(OpKind.CONCAT, ins), (lt, rt, mt), uses, (ins, CONCAT_MATMUL_ORDER), b.smem + nbytes, True)
