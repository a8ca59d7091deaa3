"""Every op a graph's tensors admit, by kind and sorted by operand tuple, made once per prefix.

A node's ops (steps K2 and B2) are those over operand tuples ranked above its last op that fit in
memory. Whether a tuple is valid, and the tensor (shape, term, after-accum flag) it makes, depend
only on the operand tensors (and, in a block graph, the for-loop range), and a child graph holds
its parent's tensors plus new ones. So a child's table is its parent's with entries added only for
the tuples that read a new tensor: O(n) new entries per node instead of O(n²), and each term is
built once per graph prefix instead of once per node that lists it. Memory and rank are checked
per node, against the entries' recorded sizes and the sorted operand tuples.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from mugraph.ir import shapes
from mugraph.ir.types import ACCUMULATORS, IN_PLACE_BLOCK_OPS, OpKind, Shape
from mugraph.stages.prune import expr as E
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.op_results import accumulator_shape, arity, fast_shape, new_tuples, op_term
from mugraph.stages.search.state import TYPE_ORDER, Attrs, Entry, OpenBlock, OpTable, State, TInfo


def _extend(base: OpTable | None, kinds: Sequence[OpKind], n: int,
            entries_of: functools.partial[list[Entry]]) -> OpTable:
    start = 0 if base is None else base.n
    all_keys: list[list[tuple[int, ...]]] = []
    all_entries: list[list[Entry]] = []
    for ki, kind in enumerate(kinds):
        kind_arity = arity(kind)
        new = entries_of(kind, new_tuples(kind_arity, start, n))
        if base is None:
            entries, keys = new, [e[0] for e in new]
        elif kind_arity == "ordered" and new:
            # An operand tuple and its attrs are unique within a kind, so entries compare on them.
            entries = sorted(base.entries[ki] + new)
            keys = [e[0] for e in entries]
        else:  # a new tuple's first index is new, so it sorts after every old one
            entries = base.entries[ki] + new
            keys = base.keys[ki] + [e[0] for e in new]
        all_entries.append(entries)
        all_keys.append(keys)
    return OpTable(n, tuple(all_keys), tuple(all_entries))


# -- block graphs ----------------------------------------------------------------------------------
def _block_entries(tensors: Sequence[TInfo], forloop: int, rdx: int, kind: OpKind,
                   tuples: Sequence[tuple[int, ...]]) -> list[Entry]:
    rank_order = TYPE_ORDER[kind]
    in_place = kind in IN_PLACE_BLOCK_OPS  # the output reuses the input's shared memory
    out: list[Entry] = []
    if kind in ACCUMULATORS:
        for ins in tuples:
            a = tensors[ins[0]]
            if a.after_accum or (shape := accumulator_shape(kind, a.shape, rdx)) is None:
                continue
            term = E.accumulator_expr(kind, a.expr, a.shape, forloop, rdx)
            t = TInfo(shape, term, True)
            out.append((ins, (ins, rank_order), kind, (), t, 0 if in_place else t.nbytes, (term,)))
        return out
    for ins in tuples:
        a = tensors[ins[0]]
        if len(ins) == 2:
            b = tensors[ins[1]]
            if a.after_accum != b.after_accum or (shape := fast_shape(kind, a.shape, b.shape)) is None:
                continue
            args: tuple[TInfo, ...] = (a, b)
        else:
            shape, args = a.shape, (a,)
        term = op_term(kind, args)
        t = TInfo(shape, term, a.after_accum)
        out.append((ins, (ins, rank_order), kind, (), t, 0 if in_place else t.nbytes, (term,)))
    return out


def block_table(b: OpenBlock, cfg: SearchConfig) -> OpTable:
    """The block ops over `b`'s tensors, extending the table it inherited from its parent graph."""
    t = b.table
    if t is None or t.n < len(b.tensors):
        entries_of = functools.partial(_block_entries, b.tensors, b.forloop, cfg.rdx)
        t = b.table = _extend(t, cfg.block_ops, len(b.tensors), entries_of)
    return t


# -- kernel graphs ---------------------------------------------------------------------------------
def _kernel_entries(tensors: Sequence[TInfo], kind: OpKind, tuples: Sequence[tuple[int, ...]]) -> list[Entry]:
    rank_order = TYPE_ORDER[kind]
    out: list[Entry] = []
    for ins in tuples:
        args = [tensors[i] for i in ins]
        first = args[0]
        dims: Sequence[int | None] = (
            [d for d, n in enumerate(first.shape) if n > 1] if kind is OpKind.REDUCTION else (None,)
        )
        for dim in dims:
            attrs: Attrs = () if dim is None else (("dim", dim),)
            if dim is not None:
                shape: Shape | None = shapes.reduction(first.shape, dim)
            else:
                shape = fast_shape(kind, first.shape, args[1].shape if len(args) == 2 else None)
            if shape is None:
                continue
            t = TInfo(shape, op_term(kind, args, attrs))
            out.append((ins, (ins, rank_order), kind, attrs, t, t.nbytes, (t.expr,)))
    return out


def kernel_table(s: State, cfg: SearchConfig) -> OpTable:
    """The pre-defined kernel ops over `s`'s tensors, extending the table it inherited."""
    t = s.table
    if t is None or t.n < len(s.tensors):
        t = s.table = _extend(t, cfg.kernel_ops, len(s.tensors), functools.partial(_kernel_entries, s.tensors))
    return t
