"""The block ops a search's oracle keeps, found with one lookup per operand tuple for every kind.

A block table's new entries are the ops over the operand tuples that read a new tensor, kind by
kind (`op_tables`). In a search most are pruned (gqa keeps 1.5% of the unary ops it looks up, under
4% of the binary ones), and each lookup, kept or not, costs a key made and hashed. The kinds of one
arity read the same tuples, and an op's result and verdict depend only on its operands (their
terms, shapes and flags, and for an accumulator the for-loop range): so one lookup per tuple finds
every kind's at once, held per search as the kinds that keep something (most tuples: none).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from mugraph.ir.types import OpKind
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.op_tables import (
    BlockKind,
    Judge,
    Made,
    OpMade,
    block_kinds_of,
    made_op,
    new_tuples_by_arity,
)
from mugraph.stages.search.state import ENTRY_NEW, Entry, OpTable, Rank, TInfo, first_above

__all__ = ["Kept", "judged_fresh"]

# What the kinds of one arity keep over one operand tuple: (the kind's place among its arity's
# kinds, its result) for each kind whose op is valid there and whose term the judge keeps.
Kept = tuple[tuple[int, OpMade], ...]
_ARITIES = ("unary", "commutative", "ordered")
_VERDICTS_MAX = 1 << 17


def judged_fresh(
    base: OpTable | None,
    cfg: SearchConfig,
    tensors: Sequence[TInfo],
    forloop: int,
    last: Rank,
    judge: Judge,
    verdicts: dict[tuple[object, ...], Kept],
) -> list[list[Entry]]:
    """Per kind of `cfg`, the entries over the tuples that read a tensor `base` lacks, ranked
    above `last`, in operand order, less those whose term `judge` prunes: as
    `op_tables.extend_block_table` lists them, filtered. `verdicts` (one per search and config)
    holds what each tuple's operands keep, so the judge hears each op's term once. Empty where
    no kind gains an entry (most extensions)."""
    n = len(tensors)
    rdx = cfg.rdx
    start = 0 if base is None else base.n
    groups = _groups(cfg.block_ops, cfg.rms_eps, cfg.layer_norm_eps, start, n)
    fresh: list[list[Entry]] = []  # one list per kind, once one gains an entry
    if len(verdicts) >= _VERDICTS_MAX:
        verdicts.clear()
    # Made this call, not judged yet: by key, each kind's place and result (None: invalid).
    pending: dict[tuple[object, ...], list[tuple[int, Made]]] = {}
    unsure = False  # whether an entry was listed from a pending result (dropped if pruned)
    for g, listed, group, specs in groups:
        # Each kind's first live tuple: a tuple counts for a kind from there on (all of them
        # where the first is above the last op's operands, as where they are all new).
        if not listed:
            continue
        if listed[0] > last[0]:
            lo, whole, lives = 0, True, None
        else:
            lives = [first_above(listed, order, last) for _, _, order in group]
            lo = min(lives)
            if lo == len(listed):
                continue
            whole = lo == max(lives)  # every kind lists every tuple from `lo`: no rank check per kind
        outs = None  # made for the first tuple whose ops keep something (most keep nothing)
        for p in range(lo, len(listed)):
            ins = listed[p]
            a = tensors[ins[0]]
            if g == 0:
                key: tuple[object, ...] = (g, a.expr, a.shape, a.after_accum, forloop)
                b = None
            else:
                b = tensors[ins[1]]
                if a.after_accum != b.after_accum:
                    continue
                key = (g, a.expr, a.shape, b.expr, b.shape, a.after_accum)
            got = verdicts.get(key)
            if got is None:
                made = pending.get(key)
                if made is None:
                    made = pending[key] = _made_all(specs, a, b, forloop, rdx)
                got = tuple([(slot, r) for slot, r in made if r is not None])
                unsure = unsure or bool(got)
            if not got:
                continue
            if outs is None:
                if not fresh:
                    fresh += [[] for _ in cfg.block_ops]
                outs = [(fresh[ki], kind, order, lives[i] if lives else 0) for i, (ki, kind, order) in enumerate(group)]
            for slot, r in got:
                out, kind, order, live = outs[slot]
                if whole or p >= live:
                    t, nbytes, terms = r
                    out.append((ins, (ins, order), kind, (), t, nbytes, terms))
    if not pending:
        return fresh
    found = dict.fromkeys([r[2][0] for made in pending.values() for _, r in made if r is not None])
    keep = judge(found) if found else frozenset()
    for key, made in pending.items():
        verdicts[key] = tuple([(slot, r) for slot, r in made if r is not None and r[2][0] in keep])
    pruned = {x for x in found if x not in keep} if unsure else None  # `keep` may hold more than `found`
    if pruned:
        fresh = [[e for e in es if e[ENTRY_NEW][0] not in pruned] if es else es for es in fresh]
    return fresh


@functools.cache
def _groups(
    ops: tuple[OpKind, ...], rms_eps: float, layer_norm_eps: float, start: int, n: int
) -> tuple[tuple[int, tuple[tuple[int, ...], ...], tuple[tuple[int, OpKind, int], ...], list[BlockKind]], ...]:
    """Per arity with kinds: its place, its tuples reading a tensor at `start` or later of `n`, its
    kinds' (place, kind, rank order) and what each needs (`op_tables.block_kinds`). Keyed by the
    config's fields rather than its kinds' records, which cost more to hash."""
    kinds = block_kinds_of(ops, rms_eps, layer_norm_eps)
    tuples = new_tuples_by_arity(start, n)
    out = []
    for g, kind_arity in enumerate(_ARITIES):
        group = tuple((ki, k[0], k[2]) for ki, k in enumerate(kinds) if k[1] == kind_arity)
        if group:
            out.append((g, tuples[kind_arity], group, [kinds[ki] for ki, _, _ in group]))
    return tuple(out)


def _made_all(specs: list[BlockKind], a: TInfo, b: TInfo | None, forloop: int, rdx: int) -> list[tuple[int, Made]]:
    """Each kind's result over the operands `a` (and `b`), by its place in `specs`."""
    return [
        (slot, made_op(kind, accum, in_place, make, a, b, forloop, rdx, eps))
        for slot, (kind, _, _, accum, in_place, make, eps, _) in enumerate(specs)
    ]
