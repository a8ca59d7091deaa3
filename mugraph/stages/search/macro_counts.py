"""A block node's lora macros counted without its macro table, for the check that rules out all
of a node's children at once (`viable.block_barren`): such a node's table would never be read.

A block-op child's block graph holds its parent's tensors and one new one, j, which its last op
made; its macros are the parent table's that it lists and the quadruples reading j. Those are
found from the pairs j concatenates into with the parent's tensors, met with the parent's pairs
(`macros._extend` keeps them grouped by what the matmul needs of them), never building a table.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from mugraph.ir.types import Shape
from mugraph.stages.search.macros import macro_entries, table_entries
from mugraph.stages.search.state import (
    CONCAT_MATMUL_ORDER,
    MacroEntry,
    MacroTable,
    OpenBlock,
    TInfo,
    shape_nbytes,
)

__all__ = ["MacroUse", "macro_count", "macro_listed"]


# The shared memory of a macro by its concatenations' shapes (`_nbytes`); emptied when too large.
_NBYTES: dict[tuple[Shape, Shape], int] = {}
_NBYTES_MAX = 1 << 14


def _nbytes(left: Shape, right: Shape) -> int:
    """The shared memory of a macro whose concatenations have shapes `left` and `right`: theirs
    and the product's."""
    return shape_nbytes(left) + shape_nbytes(right) + shape_nbytes(left[:-1] + (right[-1],))


# A macro read by its operands and the shared memory it adds: all counting asks of a macro.
MacroUse = tuple[tuple[int, int, int, int], int]


def macro_listed(b: OpenBlock, room: int) -> tuple[list[MacroEntry], list[MacroUse]]:
    """`macro_entries(b, room)`, in some order, in two parts: those over tensors older than `b`'s
    newest, and those reading it. Without extending the table where it lacks only the newest
    tensor (a block op's child): the first part is then its parent's entries that `b` lists. What
    `macro_count` goes through, listed: the tests compare the two."""
    t = _fast(b)
    tensors = b.tensors
    j = len(tensors) - 1
    if t is None:
        listed = macro_entries(b, room)
        return [e for e in listed if j not in e[0]], [(e[0], e[1]) for e in listed if j in e[0]]
    old = table_entries(t, b, room)
    out: list[MacroUse] = []
    nbytes = _NBYTES
    if len(nbytes) >= _NBYTES_MAX:
        nbytes.clear()
    new_lefts, new_rights = _new_pairs(t, tensors)
    # The last op made the newest tensor j from older ones, so it ranks below every quadruple
    # reading j whose first pair ranks at or above its operands (`macros._above`): a left pair of older
    # tensors that does, or a new left pair whose first index is at least its first operand's. The
    # parent's pairs read only older tensors, and two new pairs both read j, so a quadruple's four
    # tensors are distinct when its older pair avoids the other tensor of its new pair.
    last_ins = b.last[0]
    first = last_ins[0]
    lefts, rights = t.lefts, t.rights
    for key, pairs in new_rights.items():
        old_lefts = lefts.get(key)
        if not old_lefts:
            continue
        ranked = [(a, bb, left) for a, bb, left in old_lefts if (a, bb) >= last_ins]
        for c, d, right in pairs:
            m = d if c == j else c
            for a, bb, left in ranked:
                if a != m and bb != m:
                    if (size := nbytes.get((left, right))) is None:
                        size = nbytes[left, right] = _nbytes(left, right)
                    if size <= room:
                        out.append(((a, bb, c, d), size))
    for a, bb, left in new_lefts:
        if a < first:
            continue
        m = bb if a == j else a
        key = (len(left), left[:-2], left[-1], tensors[a].after_accum)
        for c, d, right in rights.get(key, ()):
            if c != m and d != m:
                if (size := nbytes.get((left, right))) is None:
                    size = nbytes[left, right] = _nbytes(left, right)
                if size <= room:
                    out.append(((a, bb, c, d), size))
    return old, out


def _fast(b: OpenBlock) -> MacroTable | None:
    """`b`'s macro table where it lacks only `b`'s newest tensor, which `b`'s last op (a block op)
    made: then `b`'s macros are the table's that `b` lists, and those reading the newest tensor."""
    t = b.macros
    if t is None or t.n != len(b.tensors) - 1 or not b.ops or b.last[1] >= CONCAT_MATMUL_ORDER:
        return None
    return t


def _one_pays(
    entries: Sequence[MacroEntry],
    tensors: Sequence[TInfo],
    pays_pre: list[int],
    pays_loose: list[int],
    need_pre: int,
    need_loose: int,
) -> bool:
    """Whether a macro of `entries` reads tensors that pay `need_loose` loose ends and `need_pre` of
    the pre-accumulator debt (one more where its product comes before the accumulators)."""
    pl, pp = pays_loose, pays_pre
    for e in entries:
        a, bb, c, d = e[0]
        if pl[a] + pl[bb] + pl[c] + pl[d] >= need_loose and pp[a] + pp[bb] + pp[c] + pp[d] >= need_pre + (
            not tensors[a].after_accum
        ):
            return True
    return False


def _new_pairs(
    t: MacroTable, tensors: Sequence[TInfo]
) -> tuple[list[tuple[int, int, Shape]], dict[tuple[object, ...], list[tuple[int, int, Shape]]]]:
    """The concatenations the newest tensor j makes with the table's tensors: along the last dim
    (left pairs), and along dim -2 (right pairs, grouped by what the matmul needs of them)."""
    j = len(tensors) - 1
    x = tensors[j].shape
    flag, rank = tensors[j].after_accum, len(x)
    new_lefts: list[tuple[int, int, Shape]] = []
    new_rights: dict[tuple[object, ...], list[tuple[int, int, Shape]]] = {}
    if rank >= 1:  # along the last dim
        for m in t.groups[0].get((rank, flag, x[:-1]), ()):
            y = tensors[m].shape
            new_lefts.append((m, j, y[:-1] + (y[-1] + x[-1],)))
            new_lefts.append((j, m, x[:-1] + (x[-1] + y[-1],)))
    if rank >= 2:  # along dim -2
        for m in t.groups[1].get((rank, flag, x[:-2], x[-1]), ()):
            y = tensors[m].shape
            for c, d, right in ((m, j, y[:-2] + (y[-2] + x[-2], y[-1])), (j, m, x[:-2] + (x[-2] + y[-2], x[-1]))):
                key: tuple[object, ...] = (len(right), right[:-2], right[-2], tensors[c].after_accum)
                new_rights.setdefault(key, []).append((c, d, right))
    return new_lefts, new_rights


def macro_count(
    b: OpenBlock,
    room: int,
    pays_pre: list[int],
    pays_loose: list[int],
    need_pre: int,
    need_loose: int,
    counted: bool = True,
) -> int | None:
    """How many macros `macro_entries(b, room)` lists (as `macro_listed`, without extending the
    table where it lacks only the newest tensor), or None as soon as one reads tensors that pay
    `need_loose` loose ends and `need_pre` of the pre-accumulator debt (one more where its product
    comes before the accumulators), in one pass that lists none. `viable.block_barren` asks only
    whether it is None (`counted` false): then the number is not the count, and the parent's
    entries are not gone through where none of them can pay."""
    t = _fast(b)
    tensors = b.tensors
    pl, pp = pays_loose, pays_pre
    if t is None:
        listed = macro_entries(b, room)
        return None if _one_pays(listed, tensors, pp, pl, need_pre, need_loose) else len(listed)
    j = len(tensors) - 1
    count = 0
    # Those over older tensors than the newest (a loose end) have one fewer to read, often too few.
    older_may_pay = sum(pl) - pl[j] >= need_loose
    if older_may_pay or counted:
        old = table_entries(t, b, room)
        if older_may_pay and _one_pays(old, tensors, pp, pl, need_pre, need_loose):
            return None
        count = len(old)
    new_lefts, new_rights = _new_pairs(t, tensors)
    # As in `macro_listed`; a quadruple reading j has j's flag (concatenated and multiplied
    # tensors share theirs), so what it must pay is known before its operands are. Its shared
    # memory (`_nbytes`) is worked out from each pair's: the product has the left concatenation's
    # rows and the right one's columns.
    need_pre += not tensors[j].after_accum
    last_ins = b.last[0]
    first = last_ins[0]
    lefts, rights = t.lefts, t.rights
    for key, pairs in new_rights.items():
        old_lefts = lefts.get(key)
        if not old_lefts:
            continue
        ranked = [
            (a, bb, shape_nbytes(left), 2 * prod(left[:-1]), pl[a] + pl[bb], pp[a] + pp[bb])
            for a, bb, left in old_lefts
            if (a, bb) >= last_ins
        ]
        for c, d, right in pairs:
            m = d if c == j else c
            want_loose, want_pre = need_loose - pl[c] - pl[d], need_pre - pp[c] - pp[d]
            right_room, cols = room - shape_nbytes(right), right[-1]
            for a, bb, left_bytes, row_bytes, left_loose, left_pre in ranked:
                if a != m and bb != m and left_bytes + row_bytes * cols <= right_room:
                    if left_loose >= want_loose and left_pre >= want_pre:
                        return None
                    count += 1
    for a, bb, left in new_lefts:
        if a < first:
            continue
        m = bb if a == j else a
        want_loose, want_pre = need_loose - pl[a] - pl[bb], need_pre - pp[a] - pp[bb]
        left_room, row_bytes = room - shape_nbytes(left), 2 * prod(left[:-1])
        key = (len(left), left[:-2], left[-1], tensors[a].after_accum)
        for c, d, right in rights.get(key, ()):
            if c != m and d != m and shape_nbytes(right) + row_bytes * right[-1] <= left_room:
                if pl[c] + pl[d] >= want_loose and pp[c] + pp[d] >= want_pre:
                    return None
                count += 1
    return count
