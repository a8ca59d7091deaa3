"""Which children can still lead to a candidate, by counting tensors: cheap checks that are exact.

Most of a search's nodes lie in subtrees with no candidate at all. Some of those are known to be
barren from counts alone: a block graph that owes more loose ends than its remaining block ops can
tie up never closes, and a kernel graph (one a pre-defined op makes, one a block graph opens, or one
a block graph's closing makes) with more unconsumed tensors than its remaining kernel ops can
consume never has as many as the reference has outputs. Such a child is still listed (its index
in a path stays what it is) but the search never explores it, so a rule here must only ever reject
a child with nothing below it; `tests/stages/search/test_viable.py` walks whole narrowed trees
to check that.
"""

from __future__ import annotations

import functools

from mugraph.ir.limits import DEFAULT_LIMITS
from mugraph.ir.types import IN_PLACE_BLOCK_OPS, OpKind
from mugraph.stages.search.candidates import max_block_sources
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.macro_counts import macro_count
from mugraph.stages.search.macros import MacroEntry
from mugraph.stages.search.op_results import arity, fast_shape
from mugraph.stages.search.state import ENTRY_TENSOR, TYPE_ORDER, Entry, OpenBlock, State, shape_nbytes

__all__ = ["BlockDebts", "KernelStep", "block_barren", "block_viable", "close_slack", "kernel_viable"]

# What a kernel node's child reads: its operands or its block graph's inputs, and whether it opens a
# block graph (which becomes one kernel op when it closes).
KernelStep = tuple[tuple[int, ...], bool]


# -- which block graphs can still close -----------------------------------------------------------
# A block graph closes only when none of its computed tensors dangles before its accumulators,
# (outside Mirage's block-input rule) every input is read, and at most `max_block_outputs` tensors
# dangle, or fewer where the kernel graph could not use more (closing as the last kernel op, it may
# leave no more unconsumed tensors than the reference has outputs). So it owes two debts: its
# pre-accumulator dangling tensors plus unread inputs, which must reach zero, and all its loose
# ends (those plus the after-accumulator dangling tensors), which must fall to that output limit.
# One block op lowers each debt by at most one (it consumes at most two loose ends and makes one
# tensor; an accumulator turns a pre-accumulator loose end into an after-accumulator one), and the
# lora macro by at most three (four operands, one product). So a block graph with `left` ops to go
# can close only if both debts are at most `left`, plus two while the macro is still to come.


def _loose_ends(b: OpenBlock, cfg: SearchConfig) -> tuple[int, int, int]:
    """(pre-accumulator dangling tensors plus unread inputs, all loose ends, dangling computed
    tensors: the outputs it would close with now)."""
    n_in = len(b.inputs)
    uses, tensors = b.uses, b.tensors
    dangling = [t.after_accum for u, t in zip(uses[n_in:], tensors[n_in:], strict=True) if u == 0]
    made = len(dangling)
    after = sum(dangling)
    pre = made - after
    if cfg.block_inputs != "mirage":
        pre += uses[:n_in].count(0)
    return pre, pre + after, made


def _room(left: int, has_macro: bool, cfg: SearchConfig) -> int:
    """The most either debt can fall in `left` more block ops."""
    return left + (2 if cfg.concat_matmul and not has_macro and left >= 1 else 0)


def _outlook(s: State, b: OpenBlock, cfg: SearchConfig) -> tuple[int, int]:
    """`OpenBlock.outlook`, worked out on the block graph's first node and then passed on."""
    if b.outlook is None:
        uses = s.uses
        kept = uses.count(0) - sum(1 for i in set(b.sources) if uses[i] == 0)
        left = cfg.max_kernel_ops - len(s.ops) - 1
        b.outlook = (kept, _kernel_room(left, cfg.max_block_graphs - s.n_block_graphs - 1, cfg))
    return b.outlook


def _outputs(s: State, b: OpenBlock, cfg: SearchConfig, outputs: int) -> int:
    """The most outputs `b` may close with: the limit, and no more than leaves the kernel graph
    (`s` with `b` closed) able to reach the reference's `outputs` unconsumed tensors."""
    kept, room = _outlook(s, b, cfg)
    return min(cfg.max_block_outputs, DEFAULT_LIMITS.max_block_outputs, outputs + room - kept)


def close_slack(s: State, b: OpenBlock, cfg: SearchConfig, outputs: int) -> int:
    """How much more debt the block graph `b` of `s` could take on and still close into a kernel
    graph that can reach `outputs` unconsumed tensors (negative: it never can)."""
    pre, loose, _ = _loose_ends(b, cfg)
    return _room(cfg.max_block_ops - b.op_count, b.has_macro, cfg) - max(pre, loose - _outputs(s, b, cfg, outputs))


def block_barren(s: State, b: OpenBlock, cfg: SearchConfig, outputs: int, closes: bool, room: int) -> bool:
    """Whether `block_viable` rules out every child of the block node (with `room` bytes of
    shared memory left; `closes`: whether it lists a child that closes it), telling the block ops
    apart by the node's counts alone, or, where a block op must read two loose ends, by the few
    that read two (the macros, few, one by one). Such a node's children are never listed. Most
    nodes one op short of a full block graph are such."""
    pre, loose, made = _loose_ends(b, cfg)
    limit = _outputs(s, b, cfg, outputs)
    if closes and made <= limit:
        return False
    over = loose - limit
    left = cfg.max_block_ops - b.op_count - 1
    op_room = _room(left, b.has_macro, cfg)
    need_loose = over + 1 - op_room
    need_pre_after = pre - op_room
    pays: tuple[list[int], list[int]] | None = None
    if need_loose <= 2 and need_pre_after <= 2:
        if need_loose < 2:
            return False
        pays = _pays(b, cfg)
        if _pays_two(b, cfg, room, need_pre_after, *pays):
            return False
    if not cfg.concat_matmul or b.has_macro:
        return True
    macro_room = _room(left, True, cfg)
    # A macro pays a loose end per operand that is one (at most four).
    pays_pre, pays_loose = pays or _pays(b, cfg)
    need_pre, need_loose = pre - macro_room, over + 1 - macro_room
    return macro_count(b, room, pays_pre, pays_loose, need_pre, need_loose, counted=False) is not None


@functools.cache
def _binary_kinds(kinds: tuple[OpKind, ...]) -> tuple[tuple[OpKind, bool, int, bool], ...]:
    """The binary kinds of a block-op list: (kind, whether commutative, rank order, in place)."""
    return tuple(
        (k, arity(k) == "commutative", TYPE_ORDER[k], k in IN_PLACE_BLOCK_OPS) for k in kinds if arity(k) != "unary"
    )


def _pays_two(
    b: OpenBlock, cfg: SearchConfig, room: int, need_pre_after: int, pays_pre: list[int], pays_loose: list[int]
) -> bool:
    """Whether a block op the node lists (over operands of one flag, of valid shapes, ranked above
    its last op, fitting `room`) reads two distinct loose ends and pays the pre-accumulator debt:
    the only block ops `block_viable` keeps where each must pay two loose ends."""
    tensors = b.tensors
    last_ins, last_order = b.last
    paying = [i for i, p in enumerate(pays_loose) if p]
    for x in paying:
        tx = tensors[x]
        for y in paying:
            ty = tensors[y]
            if x == y or tx.after_accum != ty.after_accum:
                continue
            if pays_pre[x] + pays_pre[y] < need_pre_after + (not tx.after_accum):
                continue
            ins = (x, y)
            for kind, commutative, order, in_place in _binary_kinds(cfg.block_ops):
                if commutative and x < y:
                    continue
                if ins < last_ins or (ins == last_ins and order <= last_order):
                    continue
                shape = fast_shape(kind, tx.shape, ty.shape)
                if shape is not None and (in_place or shape_nbytes(shape) <= room):
                    return True
    return False


def _four_may_pay(b: OpenBlock, pays_pre: list[int], pays_loose: list[int], need_pre: int, need_loose: int) -> bool:
    """Whether four distinct tensors of one after-accum flag (what a macro reads) could pay
    `need_loose` loose ends and `need_pre` of the pre-accumulator debt (one more where they come
    before the accumulators), by counting alone: a bound on `block_viable`'s verdict on every macro
    child, whatever the sizes, so a structure node asks it once for all its rows."""
    for flag in (False, True):
        ids = [i for i, t in enumerate(b.tensors) if t.after_accum == flag]
        if len(ids) < 4:
            continue
        loose = min(4, sum([pays_loose[i] for i in ids]))
        pre = min(4, sum([pays_pre[i] for i in ids]))
        if loose >= need_loose and pre >= need_pre + (not flag):
            return True
    return False


def _pays(b: OpenBlock, cfg: SearchConfig) -> tuple[list[int], list[int]]:
    """What each tensor pays off when a child reads it: toward the pre-accumulator debt, toward the
    loose ends."""
    uses, tensors = b.uses, b.tensors
    n_in = len(b.inputs)
    reads_inputs = int(cfg.block_inputs != "mirage")
    inputs = [0 if u else reads_inputs for u in uses[:n_in]]
    pays_pre = inputs + [0 if u or t.after_accum else 1 for u, t in zip(uses[n_in:], tensors[n_in:], strict=True)]
    pays_loose = inputs + [0 if u else 1 for u in uses[n_in:]]
    return pays_pre, pays_loose


def block_viable(
    s: State,
    b: OpenBlock,
    cfg: SearchConfig,
    outputs: int,
    n_closed: int,
    entries: list[Entry],
    macros: list[MacroEntry],
) -> list[bool] | None:
    """`ChildList.viable` for a block node's children: closed ones, block ops, then macros. The
    closed ones (which differ only in their omap) are kernel graphs, counted as `kernel_viable`
    counts. A block-op child raises each debt by at most one, so while the larger debt plus one
    fits in what any child has left to pay with, every such child can close, and only otherwise is
    each one checked."""
    pre, loose, made = _loose_ends(b, cfg)
    limit = _outputs(s, b, cfg, outputs)
    over = loose - limit
    closed_ok = n_closed == 0 or made <= limit  # closing now leaves `made` outputs
    left = cfg.max_block_ops - b.op_count - 1  # after the child's op
    op_room = _room(left, b.has_macro, cfg)
    macro_room = _room(left, True, cfg)
    if closed_ok and max(pre, over) + 1 <= (min(op_room, macro_room) if macros else op_room):
        return None
    # A child must pay `need_pre` (by its product's flag) and `need_loose` at least.
    pays_pre, pays_loose = _pays(b, cfg)
    tensors = b.tensors
    out = [closed_ok] * n_closed
    # Block ops read one or two tensors (maybe the same one twice).
    need_loose = over + 1 - op_room
    need_pre_after = pre - op_room
    need_pre_before = need_pre_after + 1
    if need_loose > 2 or need_pre_after > 2:  # more than two tensors can pay: none can (most nodes here)
        out += [False] * len(entries)
    elif need_loose <= 0 and need_pre_before <= 0:
        out += [True] * len(entries)
    else:
        out += [
            pays_loose[a] + (pays_loose[c] if c != a else 0) >= need_loose
            and pays_pre[a] + (pays_pre[c] if c != a else 0)
            >= (need_pre_after if e[ENTRY_TENSOR].after_accum else need_pre_before)
            for e in entries
            for a, c in ((e[0][0], e[0][-1]),)
        ]
    # A macro reads four distinct tensors; its product has its first operand's flag.
    need_loose = over + 1 - macro_room
    need_pre_after = pre - macro_room
    if need_loose <= 0 and need_pre_after + 1 <= 0:
        out += [True] * len(macros)
    elif need_loose > 4 or need_pre_after > 4:
        out += [False] * len(macros)
    else:
        out += [
            pays_loose[a] + pays_loose[c] + pays_loose[d] + pays_loose[f] >= need_loose
            and pays_pre[a] + pays_pre[c] + pays_pre[d] + pays_pre[f] >= need_pre_after + (not tensors[a].after_accum)
            for m in macros
            for a, c, d, f in (m[0],)
        ]
    return out


# -- which kernel graphs can still reach the outputs ------------------------------------------------
# A candidate is a kernel graph with as many unconsumed tensors as the reference has outputs. A
# pre-defined op consumes at most two unconsumed tensors and makes one, so it lowers their count by
# at most one; a graph-defined op consumes at most its inputs (`sources` of them: four under
# `four_input_blocks`, else at most three) and makes at least one output. So a graph with `left`
# kernel ops to go, `graphs` of them graph-defined at most, can lower the count by at most
# left + min(graphs, left) * (sources - 2).


def _kernel_room(left: int, graphs: int, cfg: SearchConfig) -> int:
    return left + min(graphs, left) * (max_block_sources(cfg) - 2)


def kernel_viable(s: State, steps: list[KernelStep], cfg: SearchConfig, outputs: int) -> list[bool] | None:
    """`ChildList.viable` for a kernel node's children (the pre-defined ops, then the block graphs
    opened): each child's count of unconsumed tensors once its op is made (at least one output for
    a block graph), against what the kernel ops after it can lower it by. A child raises the count
    by at most one, so only a node near the bound checks each child."""
    uses = s.uses
    loose = uses.count(0)
    left = cfg.max_kernel_ops - len(s.ops) - 1  # after the child's op
    graphs = cfg.max_block_graphs - s.n_block_graphs
    op_room = _kernel_room(left, graphs, cfg)
    open_room = _kernel_room(left, graphs - 1, cfg)
    if loose + 1 - outputs <= min(op_room, open_room):
        return None
    return [
        loose - sum(1 for i in set(reads) if uses[i] == 0) + 1 - outputs <= (open_room if opens else op_room)
        for reads, opens in steps
    ]


# -- the same counts, worked out once for every instantiation of a block graph's structure ----------
class BlockDebts:
    """What `block_barren` and `block_viable` count, for a block structure node: the debts and what
    each tensor pays depend on its ops, uses and after-accum flags, never on the sizes its grid,
    maps and for-loop range give, so they are worked out once for all its instantiations. Only
    the checks that need sizes (`barren_row`) are asked per instantiation."""

    __slots__ = (
        "closed_ok",
        "macro_free",
        "macro_loose",
        "macro_pre",
        "op_loose",
        "op_pre_after",
        "pays_loose",
        "pays_pre",
    )

    def __init__(self, s: State, b: OpenBlock, cfg: SearchConfig, outputs: int) -> None:
        pre, loose, made = _loose_ends(b, cfg)
        limit = _outputs(s, b, cfg, outputs)
        over = loose - limit
        self.closed_ok = made <= limit  # a closing child (or a closing row) leaves `made` outputs
        left = cfg.max_block_ops - b.op_count - 1  # after the child's op
        op_room = _room(left, b.has_macro, cfg)
        macro_room = _room(left, True, cfg)
        self.pays_pre, self.pays_loose = _pays(b, cfg)
        # What a block-op child must pay (`block_viable`), and a macro child.
        self.op_loose, self.op_pre_after = over + 1 - op_room, pre - op_room
        self.macro_loose, self.macro_pre = over + 1 - macro_room, pre - macro_room
        # No macro child that counting keeps to come: none at all, or none whose four tensors
        # could pay the debts whatever their sizes.
        self.macro_free = (
            not cfg.concat_matmul
            or b.has_macro
            or not _four_may_pay(b, self.pays_pre, self.pays_loose, self.macro_pre, self.macro_loose)
        )

    @property
    def some_entry_ok(self) -> bool:
        """Whether any block-op child may be viable: none can where more than two tensors must pay."""
        return self.op_loose <= 2 and self.op_pre_after <= 2

    @property
    def every_entry_ok(self) -> bool:
        """Whether every block-op child is viable, whatever it reads."""
        return self.op_loose <= 0 and self.op_pre_after + 1 <= 0

    @property
    def barren(self) -> bool:
        """Whether every instantiation that lists no closing child is barren (`barren_row`), by
        counting alone: no block op child can pay the debts, and no macro child."""
        return self.macro_free and not (self.op_loose <= 2 and self.op_pre_after <= 2)

    @property
    def some_macro_ok(self) -> bool:
        """Whether any macro child may be viable: none can where more than four tensors must pay."""
        if self.macro_free:
            return False
        return (self.macro_loose <= 0 and self.macro_pre + 1 <= 0) or (self.macro_loose <= 4 and self.macro_pre <= 4)

    def entry_ok(self, ins: tuple[int, ...], after_accum: bool) -> bool:
        """`block_viable`'s verdict on a block-op child reading `ins` whose product has this flag."""
        need_loose, need_pre = self.op_loose, self.op_pre_after + (not after_accum)
        if need_loose > 2 or self.op_pre_after > 2:
            return False
        if need_loose <= 0 and self.op_pre_after + 1 <= 0:
            return True
        pl, pp = self.pays_loose, self.pays_pre
        a, c = ins[0], ins[-1]
        return pl[a] + (pl[c] if c != a else 0) >= need_loose and pp[a] + (pp[c] if c != a else 0) >= need_pre

    def macro_ok(self, ins: tuple[int, int, int, int], after_accum: bool) -> bool:
        """`block_viable`'s verdict on a macro child reading `ins` (its product has `a`'s flag)."""
        need_loose, need_pre = self.macro_loose, self.macro_pre
        if need_loose <= 0 and need_pre + 1 <= 0:
            return True
        if need_loose > 4 or need_pre > 4:
            return False
        pl, pp = self.pays_loose, self.pays_pre
        a, c, d, f = ins
        return pl[a] + pl[c] + pl[d] + pl[f] >= need_loose and pp[a] + pp[c] + pp[d] + pp[f] >= need_pre + (
            not after_accum
        )

    def barren_row(self, b: OpenBlock, cfg: SearchConfig, closes: bool, room: int) -> bool:
        """`block_barren` for one instantiation `b` of the structure (`closes`: whether it lists a
        closing child; `room`: its shared memory left)."""
        if closes and self.closed_ok:
            return False
        # `block_barren`'s needs are a block-op child's: a node with neither short of what two
        # tensors pay lists a child that can close whatever its sizes.
        need_loose, need_pre_after = self.op_loose, self.op_pre_after
        if need_loose <= 2 and need_pre_after <= 2:
            if need_loose < 2:
                return False
            if _pays_two(b, cfg, room, need_pre_after, self.pays_pre, self.pays_loose):
                return False
        if self.macro_free:
            return True
        return (
            macro_count(b, room, self.pays_pre, self.pays_loose, self.macro_pre, self.macro_loose, counted=False)
            is not None
        )
