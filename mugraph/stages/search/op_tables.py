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

import bisect
import functools
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

from mugraph.ir import shapes
from mugraph.ir.types import ACCUMULATORS, IN_PLACE_BLOCK_OPS, AccumKind, OpKind
from mugraph.stages.prune import expr as E
from mugraph.stages.search.config import SearchConfig, eps_for
from mugraph.stages.search.op_results import accumulator_shape, arity, fast_shape, new_tuples, op_term, term_maker
from mugraph.stages.search.state import (
    ENTRY_INS,
    ENTRY_NBYTES,
    TYPE_ORDER,
    Attrs,
    Entry,
    OpenBlock,
    OpTable,
    Rank,
    State,
    TInfo,
    first_above,
    shape_nbytes,
)


def _merged(
    base: OpTable | None, ki: int, ordered: bool, new: list[Entry]
) -> tuple[list[tuple[int, ...]], list[Entry], int]:
    """Kind `ki`'s keys, entries and most memory added: the parent's with `new` added in
    operand-tuple order."""
    if base is not None and not new:  # tables are never changed once made: a child shares its parent's
        return base.keys[ki], base.entries[ki], base.big[ki]
    big = max([e[ENTRY_NBYTES] for e in new], default=0)
    if base is None:
        return [e[ENTRY_INS] for e in new], new, big
    big = max(big, base.big[ki])
    if ordered:
        # An operand tuple and its attrs are unique within a kind, so entries compare on them.
        entries = sorted(base.entries[ki] + new)
        return [e[ENTRY_INS] for e in entries], entries, big
    # A new tuple's first index is new, so it sorts after every old one.
    return base.keys[ki] + [e[ENTRY_INS] for e in new], base.entries[ki] + new, big


def _extend(
    base: OpTable | None, kinds: Sequence[OpKind], n: int, entries_of: functools.partial[list[Entry]]
) -> OpTable:
    start = 0 if base is None else base.n
    all_keys: list[list[tuple[int, ...]]] = []
    all_entries: list[list[Entry]] = []
    all_big: list[int] = []
    for ki, kind in enumerate(kinds):
        kind_arity = arity(kind)
        keys, entries, big = _merged(
            base, ki, kind_arity == "ordered", entries_of(kind, new_tuples(kind_arity, start, n))
        )
        all_entries.append(entries)
        all_keys.append(keys)
        all_big.append(big)
    return OpTable(n, tuple(all_keys), tuple(all_entries), tuple(all_big))


# -- block graphs ----------------------------------------------------------------------------------
# What a block kind's entries need, worked out once per kind list: (kind, operand arity, rank
# order, the kind again if it is an accumulator (else None), whether its output reuses its input's
# shared memory, its term maker for ops that are not accumulators, its eps, and the tag that keys
# its results in `_MADE`: the rank order, paired with the eps where there is one, since one process
# searches fragments with different eps).
BlockKind = tuple[OpKind, str, int, AccumKind | None, bool, Callable[..., E.Expr] | None, float, object]


def block_kinds(cfg: SearchConfig) -> tuple[BlockKind, ...]:
    """What each of `cfg`'s block kinds' entries need, in its order."""
    return block_kinds_of(cfg.block_ops, cfg.rms_eps, cfg.layer_norm_eps)


@functools.cache
def block_kinds_of(kinds: tuple[OpKind, ...], rms_eps: float, layer_norm_eps: float) -> tuple[BlockKind, ...]:
    """`block_kinds` of a config with these kinds and eps."""
    out: list[BlockKind] = []
    for k in kinds:
        eps = eps_for(k, rms_eps, layer_norm_eps)
        order = TYPE_ORDER[k]
        make = None if k in ACCUMULATORS else term_maker(k, eps)
        accum = k if k in ACCUMULATORS else None
        out.append((k, arity(k), order, accum, k in IN_PLACE_BLOCK_OPS, make, eps, (order, eps) if eps else order))
    return tuple(out)


# What one block op makes over operands of given terms, shapes and after-accum flags: the tensor,
# the shared memory it adds and its new terms, or None where the operands are invalid. Keyed by
# the kind's rank order, the operands' (term, shape, flag) and, for accumulators, the for-loop
# range and rdx. The same operands meet again at node after node (a block graph's inputs carry the
# kernel tensors' terms under every grid, map and for-loop range, and so do most ops over them),
# so each result is worked out once and its tensor shared; terms are hash-consed, so a key holding
# them compares by identity. Emptied when it grows too large.
OpMade = tuple[TInfo, int, tuple[E.Expr, ...]]  # the tensor, the shared memory it adds, its new terms
Made = OpMade | None
# The search's oracle: of a batch of distinct terms, a set holding those it keeps.
Judge = Callable[[dict[E.Expr, None]], set[E.Expr] | frozenset[E.Expr]]
_MADE: dict[tuple[object, ...], Made] = {}
_MADE_MAX = 1 << 17
_MISSING: Any = object()  # typed Any: a `get` default that mypy lets the hits unpack past


def made_op(
    kind: OpKind,
    accum: AccumKind | None,
    in_place: bool,
    make: Callable[..., E.Expr] | None,
    a: TInfo,
    b: TInfo | None,
    forloop: int,
    rdx: int,
    eps: float = 0.0,
) -> Made:
    """What one block op makes over the operands `a` (and `b`): a `_MADE` result, worked out."""
    if accum is not None:
        if a.after_accum or (shape := accumulator_shape(accum, a.shape, rdx)) is None:
            return None
        term = E.accumulator_expr(accum, a.expr, a.shape, forloop, rdx, eps)
        return TInfo(shape, term, True), 0 if in_place else shape_nbytes(shape), (term,)
    assert make is not None
    if b is None:
        term = make(a)
        return TInfo(a.shape, term, a.after_accum), 0 if in_place else shape_nbytes(a.shape), (term,)
    if a.after_accum != b.after_accum or (shape := fast_shape(kind, a.shape, b.shape)) is None:
        return None
    term = make(a, b)
    return TInfo(shape, term, a.after_accum), 0 if in_place else shape_nbytes(shape), (term,)


@functools.cache
def new_tuples_by_arity(start: int, n: int) -> dict[str, tuple[tuple[int, ...], ...]]:
    return {a: new_tuples(a, start, n) for a in ("unary", "commutative", "ordered")}


def extend_block_table(
    base: OpTable | None,
    cfg: SearchConfig,
    tensors: Sequence[TInfo],
    forloop: int,
    last: Rank,
) -> OpTable:
    """The table over `tensors`, extending `base` (over a prefix of them) with the tuples that read
    a tensor it did not have. Same entries as listing each kind's tuples one by one, in one pass,
    less those ranked at or below `last`: a block graph's ops come in rank order, so neither the
    graph whose last op is `last` nor any graph grown from it (the only ones that get this table)
    lists them. (`judged_ops` makes a search's tables, less the ops its oracle prunes.)"""
    return merged_block_table(base, cfg, len(tensors), last, _fresh_entries(base, cfg, tensors, forloop, last))


def _fresh_entries(
    base: OpTable | None, cfg: SearchConfig, tensors: Sequence[TInfo], forloop: int, last: Rank
) -> list[list[Entry]]:
    """Per kind, the valid entries over the tuples that read a tensor `base` lacks, ranked above
    `last`, in operand order."""
    n = len(tensors)
    rdx = cfg.rdx
    start = 0 if base is None else base.n
    tuples = new_tuples_by_arity(start, n)
    made = _MADE
    if len(made) >= _MADE_MAX:
        made.clear()
    get = made.get
    missing = _MISSING
    fresh: list[list[Entry]] = []
    for kind, kind_arity, order, accum, in_place, make, eps, tag in block_kinds(cfg):
        new: list[Entry] = []
        add = new.append
        fresh.append(new)
        listed = tuples[kind_arity]
        live = first_above(listed, order, last)
        if live:
            listed = listed[live:]
        if kind_arity == "unary":
            for ins in listed:
                a = tensors[ins[0]]
                if accum is not None:
                    if a.after_accum:
                        continue
                    key: tuple[object, ...] = (tag, a.expr, a.shape, forloop, rdx)
                else:
                    key = (tag, a.expr, a.shape, a.after_accum)
                r = get(key, missing)
                if r is missing:
                    r = made[key] = made_op(kind, accum, in_place, make, a, None, forloop, rdx, eps)
                if r is not None:
                    t, nbytes, terms = r
                    add((ins, (ins, order), kind, (), t, nbytes, terms))
        else:
            for ins in listed:
                a = tensors[ins[0]]
                b = tensors[ins[1]]
                flag = a.after_accum
                if flag != b.after_accum:
                    continue
                key = (tag, a.expr, a.shape, b.expr, b.shape, flag)
                r = get(key, missing)
                if r is missing:
                    r = made[key] = made_op(kind, accum, in_place, make, a, b, forloop, rdx)
                if r is not None:
                    t, nbytes, terms = r
                    add((ins, (ins, order), kind, (), t, nbytes, terms))
    return fresh


# The most entries a table holds in one list beside its per-kind lists (`OpTable.flat`): listing
# passes over each entry, where the per-kind lists cost a bisect per kind.
FLAT_MAX = 32


def merged_block_table(
    base: OpTable | None, cfg: SearchConfig, n: int, last: Rank, fresh: list[list[Entry]]
) -> OpTable:
    """The table over `n` tensors: `base`'s entries ranked above `last` with `fresh` (per kind, the
    entries over the tuples reading a tensor `base` lacks, in operand order; or no list where
    none reads one) merged in."""
    if not any(fresh):  # most extensions of a search's tables add nothing
        if base is not None:
            return OpTable(n, base.keys, base.entries, base.big, base.flat)
        fresh = [[] for _ in cfg.block_ops]
    kinds = block_kinds(cfg)
    start = 0 if base is None else base.n
    all_keys: list[list[tuple[int, ...]]] = []
    all_entries: list[list[Entry]] = []
    all_big: list[int] = []
    for ki, new in enumerate(fresh):
        if not new:  # most kinds add nothing
            if base is None:
                all_keys.append([])
                all_entries.append(new)
                all_big.append(0)
            else:  # tables are never changed once made: a child shares its parent's
                all_keys.append(base.keys[ki])
                all_entries.append(base.entries[ki])
                all_big.append(base.big[ki])
            continue
        new_keys = [e[ENTRY_INS] for e in new]
        big = max([e[ENTRY_NBYTES] for e in new])
        if base is None:
            all_keys.append(new_keys)
            all_entries.append(new)
            all_big.append(big)
            continue
        kind_arity, order = kinds[ki][1], kinds[ki][2]
        old_big = base.big[ki]
        all_big.append(big if big > old_big else old_big)
        old_keys, old_entries = base.keys[ki], base.entries[ki]
        cut = first_above(old_keys, order, last)
        if cut:  # the parent's entries this graph's rank has passed
            old_keys, old_entries = old_keys[cut:], old_entries[cut:]
        if kind_arity == "ordered" and new_keys[0][0] < start:
            keys, entries = _merge_ordered(old_keys, old_entries, new_keys, new, start)
            all_keys.append(keys)
            all_entries.append(entries)
        else:
            # A new tuple whose first index is new sorts after every old one.
            all_keys.append(old_keys + new_keys)
            all_entries.append(old_entries + new)
    flat = list(chain.from_iterable(all_entries)) if sum(map(len, all_entries)) <= FLAT_MAX else None
    return OpTable(n, tuple(all_keys), tuple(all_entries), tuple(all_big), flat)


def _merge_ordered(
    keys: list[tuple[int, ...]], entries: list[Entry], new_keys: list[tuple[int, ...]], new: list[Entry], start: int
) -> tuple[list[tuple[int, ...]], list[Entry]]:
    """An ordered kind's keys and entries with the new ones merged in, in operand order. A new
    pair (i, j) with an old first index i reads a new tensor j, so it goes after every old pair
    (i, ·) and before (i + 1, ·); the new pairs whose first index is new go last."""
    out_keys: list[tuple[int, ...]] = []
    out_entries: list[Entry] = []
    prev = 0
    rest = len(new_keys)
    for pos, key in enumerate(new_keys):
        if key[0] >= start:
            rest = pos
            break
        at = bisect.bisect_left(keys, (key[0] + 1,), prev)
        if at > prev:
            out_keys += keys[prev:at]
            out_entries += entries[prev:at]
            prev = at
        out_keys.append(key)
        out_entries.append(new[pos])
    out_keys += keys[prev:]
    out_entries += entries[prev:]
    out_keys += new_keys[rest:]
    out_entries += new[rest:]
    return out_keys, out_entries


def block_entries(
    rows: Sequence[OpenBlock], cfg: SearchConfig, kind: OpKind, ins: tuple[int, ...]
) -> list[Entry | None]:
    """Per row, the entry `block_table(row, cfg)` holds for `kind` over the operands `ins`, worked
    out alone (with `extend_block_table`'s keys and results): None where `ins` is not one of the
    kind's operand tuples over the row's tensors or the operands are invalid. Replaying a path needs
    one child's entry per row, not the rows' whole tables; the kind is looked up once for them all."""
    found = [k for k in block_kinds(cfg) if k[0] is kind]
    if not found or min(ins) < 0:
        return [None] * len(rows)
    _, kind_arity, order, accum, in_place, make, eps, tag = found[0]
    if len(ins) != (1 if kind_arity == "unary" else 2) or (kind_arity == "commutative" and ins[1] > ins[0]):
        return [None] * len(rows)
    top, rank, rdx = max(ins), (ins, order), cfg.rdx
    out: list[Entry | None] = []
    for b in rows:
        tensors = b.tensors
        if top >= len(tensors):
            out.append(None)
            continue
        a = tensors[ins[0]]
        other = None
        if kind_arity == "unary":
            if accum is not None:
                if a.after_accum:
                    out.append(None)
                    continue
                key: tuple[object, ...] = (tag, a.expr, a.shape, b.forloop, rdx)
            else:
                key = (tag, a.expr, a.shape, a.after_accum)
        else:
            other = tensors[ins[1]]
            if a.after_accum != other.after_accum:
                out.append(None)
                continue
            key = (tag, a.expr, a.shape, other.expr, other.shape, a.after_accum)
        r = _MADE.get(key, _MISSING)
        if r is _MISSING:
            if len(_MADE) >= _MADE_MAX:
                _MADE.clear()
            r = _MADE[key] = made_op(kind, accum, in_place, make, a, other, b.forloop, rdx, eps)
        out.append(None if r is None else (ins, rank, kind, (), r[0], r[1], r[2]))
    return out


def block_table(b: OpenBlock, cfg: SearchConfig) -> OpTable:
    """The block ops over `b`'s tensors, extending the table it inherited from its parent graph
    (`block_tables.BlockTables` makes a search's: judged once per operand tuple)."""
    t = b.table
    if t is None or t.n < len(b.tensors):
        t = b.table = extend_block_table(t, cfg, b.tensors, b.forloop, b.last)
    return t


# -- kernel graphs ---------------------------------------------------------------------------------
def _kernel_entries(
    tensors: Sequence[TInfo], cfg: SearchConfig, kind: OpKind, tuples: Sequence[tuple[int, ...]]
) -> list[Entry]:
    """Kind `kind`'s entries over `tuples`. Most tuples fail the shape check, so each arity has its
    own loop that reads the operands and checks shapes before it builds anything."""
    rank_order = TYPE_ORDER[kind]
    out: list[Entry] = []
    add = out.append
    if kind is OpKind.REDUCTION:  # one op per dim of size above 1
        for ins in tuples:
            a = tensors[ins[0]]
            for dim, size in enumerate(a.shape):
                if size > 1:
                    attrs: Attrs = (("dim", dim),)
                    t = TInfo(shapes.reduction(a.shape, dim), op_term(kind, (a,), attrs))
                    add((ins, (ins, rank_order), kind, attrs, t, t.nbytes, (t.expr,)))
        return out
    make = term_maker(kind, cfg.eps_of(kind))
    shape_of = fast_shape
    if arity(kind) == "unary":
        for ins in tuples:
            a = tensors[ins[0]]
            if (shape := shape_of(kind, a.shape, None)) is None:
                continue
            t = TInfo(shape, make(a))
            add((ins, (ins, rank_order), kind, (), t, t.nbytes, (t.expr,)))
        return out
    for ins in tuples:
        a, b = tensors[ins[0]], tensors[ins[1]]
        if (shape := shape_of(kind, a.shape, b.shape)) is None:
            continue
        t = TInfo(shape, make(a, b))
        add((ins, (ins, rank_order), kind, (), t, t.nbytes, (t.expr,)))
    return out


def kernel_table(s: State, cfg: SearchConfig) -> OpTable:
    """The pre-defined kernel ops over `s`'s tensors, extending the table it inherited."""
    t = s.table
    if t is None or t.n < len(s.tensors):
        t = s.table = _extend(t, cfg.kernel_ops, len(s.tensors), functools.partial(_kernel_entries, s.tensors, cfg))
    return t
