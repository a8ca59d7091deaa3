"""The children of a search state, in a fixed order: Mirage's steps K2, K3, B1, B2 (§2).

Kernel level: pre-defined ops (K2) over operand tuples, then opening a graph-defined op (K3) in two
steps (grid and imaps, then fmaps and for-loop range), so no node has tens of thousands of
children. Block level: closing the block graph (B1, one child per omap), then block ops and
accumulators (B2). A child is listed only if it passes the canonical order, shape and memory
checks; the abstract-expression oracle is asked later, for all children of a node at once, so a
child's index (its choice in a path) never depends on the oracle or its memo, nor on the counts
that show a child can never reach a candidate (`ChildList.viable`, asked with the oracle).
Pre-defined ops and block ops come from the graph's op table (`op_tables`), which a child graph
extends rather than rebuilds.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any, overload

from mugraph.ir.limits import DEFAULT_LIMITS
from mugraph.ir.types import Dim3, OpKind
from mugraph.stages.prune import expr as E
from mugraph.stages.search import candidates as C
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.macros import MacroEntry, macro_child, macro_entries, macro_new
from mugraph.stages.search.op_tables import Judge, block_table, kernel_table
from mugraph.stages.search.state import (
    ENTRY_INS,
    ENTRY_NEW,
    INPUT_RANK,
    TYPE_ORDER,
    BlockInput,
    BlockSpec,
    Entry,
    KernelOp,
    OpenBlock,
    OpSpec,
    OpTable,
    State,
    TInfo,
    bump,
)
from mugraph.stages.search.viable import KernelStep, block_barren, block_viable, kernel_viable

TableOf = Callable[[OpenBlock, SearchConfig], OpTable]  # a block graph's op table (`child_list`)

__all__ = [
    "Barren",
    "Child",
    "ChildList",
    "child_list",
    "children",
    "describe_instances",
    "find_instance",
    "instance_at",
    "kept_indices",
]


class Child:
    """A listed child: the terms its step creates (what the oracle judges) and how to make its
    state. Most children are pruned, so the state, with its tuples and label, is made only when
    `build` is called for one that is kept (or replayed)."""

    __slots__ = ("_args", "_make", "new")

    def __init__(self, new: tuple[E.Expr, ...], make: Callable[..., State], *args: Any) -> None:
        self.new = new
        self._make = make
        self._args = args

    def build(self) -> State:
        return self._make(*self._args)


def _made(state: State) -> State:
    return state


class ChildList(Sequence[Child]):
    """A node's children in their fixed order. Their new terms (`news`, what the oracle judges)
    are listed up front; a `Child` object is made only for an index asked for, since most
    children are pruned. Block ops (most of a search's children) stay table entries until then."""

    __slots__ = ("_entries", "_head", "_kids", "_macros", "_news", "_node", "_reads")

    def __init__(
        self,
        news: list[tuple[E.Expr, ...]],
        kids: list[Child],
        entries: list[Entry] | None = None,
        node: tuple[State, OpenBlock] | None = None,
        macros: list[MacroEntry] | None = None,
        reads: tuple[State, list[KernelStep]] | None = None,
    ) -> None:
        # Order: `kids`, then the block-op `entries`, then the `macros` (both children of `node`).
        # `news`: the terms of `kids` and `entries`; the macros' are made when asked for (most
        # macro children are ruled out by counting, and are never judged).
        # `reads`: of a kernel node, the node and what each of its `kids` reads.
        self._head = news
        self._kids = kids
        self._entries = entries or []
        self._node = node
        self._macros = macros or []
        self._news = None if self._macros else news
        self._reads = reads

    def __len__(self) -> int:
        return len(self._head) + len(self._macros)

    @property
    def news(self) -> list[tuple[E.Expr, ...]]:
        """Every child's new terms, in order (what the oracle judges)."""
        if self._news is None:
            assert self._node is not None, "only a block node lists macros"
            tensors = self._node[1].tensors
            self._news = self._head + [macro_new(tensors, m) for m in self._macros]
        return self._news

    def news_at(self, indices: list[int]) -> list[tuple[E.Expr, ...]]:
        """The new terms of the children at these indices (ascending), making only those macros'."""
        head = self._head
        if self._news is not None or not indices or indices[-1] < len(head):
            return list(map((self._news or head).__getitem__, indices))
        at = bisect.bisect_left(indices, len(head))
        out = list(map(head.__getitem__, indices[:at]))
        assert self._node is not None, "only a block node lists macros"
        tensors, macros, n = self._node[1].tensors, self._macros, len(head)
        out += [macro_new(tensors, macros[i - n]) for i in indices[at:]]
        return out

    @property
    def barren(self) -> bool:
        """Whether counting rules out every child (`Barren`)."""
        return False

    def viable(self, cfg: SearchConfig, outputs: int) -> list[bool] | None:
        """Per child, whether a candidate with `outputs` unconsumed tensors can still come of it
        within the ops left, as far as counting tensors tells (None: every child can). A child
        that cannot is listed, so indices stay what they are, but never explored."""
        if self._node is not None:
            return block_viable(*self._node, cfg, outputs, len(self._kids), self._entries, self._macros)
        if self._reads is not None:
            return kernel_viable(*self._reads, cfg, outputs)
        return None

    @overload
    def __getitem__(self, i: int) -> Child: ...

    @overload
    def __getitem__(self, i: slice) -> list[Child]: ...

    def __getitem__(self, i: int | slice) -> Child | list[Child]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        if i < 0:
            i += n
        n_kids = len(self._kids)
        if i < n_kids:
            return self._kids[i]
        i -= n_kids
        assert self._node is not None, "only a block node lists entries"
        if i < len(self._entries):
            e = self._entries[i]
            return Child(e[ENTRY_NEW], _block_child, *self._node, e)
        m = self._macros[i - len(self._entries)]
        return Child(macro_new(self._node[1].tensors, m), macro_child, *self._node, m)


class Barren(ChildList):
    """The children of a block node that counting shows has none that can reach a candidate
    (`viable.block_barren`): not listed, nor counted, since the search never looks below such a
    node. Asked for them (their number, a child, their terms: a path replayed through it, say),
    it lists them as any other node does."""

    __slots__ = ("_full",)

    def __init__(self, node: tuple[State, SearchConfig]) -> None:
        self._head, self._kids, self._entries, self._node, self._macros = [], [], [], None, []
        self._news, self._reads = None, None
        self._full: tuple[State, SearchConfig] | ChildList = node

    @property
    def barren(self) -> bool:
        return True

    def _listed(self) -> ChildList:
        """The children, listed as `child_list` lists any block node's."""
        full = self._full
        if not isinstance(full, ChildList):
            state, cfg = full
            assert state.block is not None
            b = state.block
            full = self._full = _block_op_children(state, b, cfg, _closed(state, b, list(_close_omaps(state, b, cfg))))
        return full

    def __len__(self) -> int:
        return len(self._listed())

    @property
    def news(self) -> list[tuple[E.Expr, ...]]:
        return self._listed().news

    def news_at(self, indices: list[int]) -> list[tuple[E.Expr, ...]]:
        return self._listed().news_at(indices)

    def viable(self, cfg: SearchConfig, outputs: int) -> list[bool] | None:
        return [False] * len(self)

    def __getitem__(self, i: int | slice) -> Child | list[Child]:  # type: ignore[override]
        return self._listed()[i]


def child_list(state: State, cfg: SearchConfig, outputs: int | None = None, table: TableOf = block_table) -> ChildList:
    """The children of `state`, in their fixed order (a child's index is its choice in a path).
    Given the reference's number of `outputs`, a block node whose children counting rules out
    all at once lists none (`Barren`). `table` gives a block graph's op table: every op by default;
    a search's judged tables (`BlockTables.table`) list only the ops its oracle keeps, so the kept
    children come in the same order from fewer listed."""
    if state.block is None:
        return _kernel_children(state, cfg)
    if not state.block.configured:
        return _plain([Child((), _made, k) for k in _loop_children(state, state.block, cfg)])
    b = state.block
    closings = list(_close_omaps(state, b, cfg))  # most nodes return before the first omap
    room = DEFAULT_LIMITS.smem_bytes - b.smem
    if (
        outputs is not None
        and b.op_count < cfg.max_block_ops
        and block_barren(state, b, cfg, outputs, bool(closings), room)
    ):
        return Barren((state, cfg))
    return _block_op_children(state, b, cfg, _closed(state, b, closings), table)


def _closed(state: State, b: OpenBlock, closings: list[Closing]) -> list[Child]:
    return [Child((), _made, k) for k in _close_children(state, b, closings)]


def _plain(kids: list[Child]) -> ChildList:
    return ChildList([k.new for k in kids], kids)


def children(state: State, cfg: SearchConfig) -> list[State]:
    return [c.build() for c in child_list(state, cfg)]


def kept_indices(kids: ChildList, cfg: SearchConfig, outputs: int, judge: Judge) -> list[int]:
    """Indices of the children that counting does not rule out (`ChildList.viable`) and whose new
    terms `judge` (the oracle's `kept`) keeps: the children the instantiated tree explores."""
    if kids.barren:
        return []
    viable = kids.viable(cfg, outputs)
    judged: Sequence[int] = range(len(kids)) if viable is None else [i for i, v in enumerate(viable) if v]
    news = kids.news_at(list(judged))
    terms = dict.fromkeys(t for new in news for t in new)
    keep = judge(terms) if terms else frozenset()
    return [i for i, new in zip(judged, news, strict=True) if keep.issuperset(new)]


def _along(root: State, cfg: SearchConfig, path: Sequence[int]) -> Iterator[State]:
    """The states a path of choices goes through in the instantiated tree, after `root`."""
    state = root
    for idx in path:
        state = child_list(state, cfg)[idx].build()
        yield state


def instance_at(root: State, cfg: SearchConfig, path: Sequence[int]) -> State:
    """The state a path of choices names in the instantiated tree (`child_list`'s, one state per
    grid, map and for-loop range), from `root`."""
    return [root, *_along(root, cfg, path)][-1]


def describe_instances(root: State, cfg: SearchConfig, path: Sequence[int]) -> list[str]:
    """The choices along a path of the instantiated tree, readable (`open(grid=...)`, `matmul(0,1)`)."""
    return [state.label for state in _along(root, cfg, path)]


def find_instance(root: State, cfg: SearchConfig, labels: Sequence[str]) -> State:
    """The state reached from `root` by the choices labelled `labels` in the instantiated tree."""
    state = root
    for label in labels:
        kids = [k.build() for k in child_list(state, cfg)]
        match = [k for k in kids if k.label == label]
        if not match:
            raise ValueError(f"no choice is labelled {label!r} after {state.label!r}")
        state = match[0]
    return state


# -- kernel level --------------------------------------------------------------------------------
def _kernel_child(s: State, e: Entry) -> State:
    ins, rank, kind, attrs, t, nbytes, new = e
    dim = attrs[0][1] if attrs else None
    label = f"{kind}({','.join(map(str, ins))}{'' if dim is None else f';{dim}'})"
    return State(
        s.tensors + (t,),
        bump(s.uses, ins, 1),
        s.ops + (KernelOp(kind, ins, attrs),),
        rank,
        s.dmem + nbytes,
        None,
        new,
        label,
        s.table,
    )


def _kernel_children(s: State, cfg: SearchConfig) -> ChildList:
    """K2: one pre-defined op over every operand tuple ranked above the last op, whose output fits
    in device memory; then K3's first step."""
    if len(s.ops) >= cfg.max_kernel_ops:
        return _plain([])
    room = DEFAULT_LIMITS.dmem_bytes - s.dmem
    entries = kernel_table(s, cfg).listed(cfg.kernel_ops, s.last, room)
    opened = _open_children(s, cfg)
    kids = [Child(e[ENTRY_NEW], _kernel_child, s, e) for e in entries]
    kids += [Child((), _made, k) for k in opened]
    steps: list[KernelStep] = [(e[ENTRY_INS], False) for e in entries]
    steps += [(k.block.sources, True) for k in opened if k.block is not None]
    return ChildList([k.new for k in kids], kids, reads=(s, steps))


def _open_children(s: State, cfg: SearchConfig) -> list[State]:
    """K3, first step: a graph-defined op's inputs (one of `block_source_options`, in their sorted
    order), grid and imaps."""
    if s.n_block_graphs >= cfg.max_block_graphs or len(s.ops) >= cfg.max_kernel_ops:
        return []
    options = C.block_source_options(len(s.tensors), cfg)
    mirage = C.block_sources(len(s.tensors), cfg)
    out = []
    for sources in options:
        if (sources, TYPE_ORDER[OpKind.CUSTOMIZED]) <= s.last:
            continue
        in_shapes = [s.tensors[i].shape for i in sources]
        # the label names the inputs where they are not Mirage's tuple (labels stay unique)
        reads = "" if sources == mirage else f"inputs={list(sources)},"
        for grid in C.grid_candidates(in_shapes, cfg):
            for imaps in C.imap_combos(in_shapes, grid, cfg):
                block = OpenBlock(sources, grid, imaps)
                label = f"open({reads}grid={list(grid)},imaps={[list(m) for m in imaps]})"
                out.append(State(s.tensors, s.uses, s.ops, s.last, s.dmem, block, (), label, s.table))
    return out


def _loop_children(s: State, b: OpenBlock, cfg: SearchConfig) -> list[State]:
    """K3, second step: fmaps and for-loop range; creates the block inputs (shared memory checked)."""
    grid_tiles = [C.tile_after_grid(s.tensors[src].shape, b.grid, m) for src, m in zip(b.sources, b.imaps, strict=True)]
    out = []
    for fmaps, frange in C.loop_options(grid_tiles, cfg):
        tensors = []
        for src, tile, f in zip(b.sources, grid_tiles, fmaps, strict=True):
            t = list(tile)
            if f >= 0:
                t[f] //= frange
            tensors.append(TInfo(tuple(t), s.tensors[src].expr))
        smem = sum(t.nbytes for t in tensors)
        if smem > DEFAULT_LIMITS.smem_bytes:
            continue
        inputs = tuple(BlockInput(src, m, f) for src, m, f in zip(b.sources, b.imaps, fmaps, strict=True))
        block = OpenBlock(
            b.sources, b.grid, b.imaps, frange, inputs, (), tuple(tensors), (0,) * len(tensors), INPUT_RANK, smem
        )
        out.append(
            State(s.tensors, s.uses, s.ops, s.last, s.dmem, block, (), f"loop(fmaps={list(fmaps)},F={frange})", s.table)
        )
    return out


# -- block level ---------------------------------------------------------------------------------
# One way to close a block graph (B1): the omap, the dangling tensors, the outputs they become
# and the device memory those add.
Closing = tuple[Dim3, list[int], tuple[TInfo, ...], int]


def _close_omaps(s: State, b: OpenBlock, cfg: SearchConfig) -> Iterator[Closing]:
    """B1's choices, in order: each omap under which every dangling computed tensor becomes an
    output within device memory, with those tensors and the outputs they become."""
    dangling = close_dangling(b, cfg)
    if dangling is not None:
        yield from row_closings(s, b, dangling, cfg)


def close_dangling(b: OpenBlock, cfg: SearchConfig) -> list[int] | None:
    """The dangling tensors a block graph would close with, or None where it cannot close: a
    computed tensor dangles before the accumulators, or none or too many dangle. Outside Mirage's
    block-input rule, a block graph with an input no block op reads is never closed (the same
    graph without that input is in the space). Counting alone: the same for every grid, map and
    for-loop range of the graph."""
    n_in = len(b.inputs)
    uses = b.uses
    if len(uses) > n_in and uses[-1] == 0 and not b.tensors[-1].after_accum:
        return None  # the newest tensor, most often dangling before the accumulators
    unread = uses[:n_in].count(0)
    if unread and cfg.block_inputs != "mirage":
        return None
    # Counted first (most nodes have too many dangling tensors, or none): listed only if they may close.
    if not 1 <= uses.count(0) - unread <= min(cfg.max_block_outputs, DEFAULT_LIMITS.max_block_outputs):
        return None
    dangling = [i for i in range(n_in, len(b.tensors)) if uses[i] == 0]
    if not all(b.tensors[i].after_accum for i in dangling):
        return None
    return dangling


def row_closings(s: State, b: OpenBlock, dangling: list[int], cfg: SearchConfig) -> Iterator[Closing]:
    """The ways to close `b` with its `dangling` tensors as outputs: one per omap under which they
    fit in device memory."""
    rank = min(len(b.tensors[i].shape) for i in dangling)
    for omap in C.omap_candidates(b.grid, rank, cfg):
        new = []
        for i in dangling:
            shape = list(b.tensors[i].shape)
            for d, g in zip(omap, b.grid, strict=True):
                if d >= 0:
                    shape[d] *= g
            new.append(TInfo(tuple(shape), b.tensors[i].expr))
        extra = sum(t.nbytes for t in new)
        if s.dmem + extra <= DEFAULT_LIMITS.dmem_bytes:
            yield omap, dangling, tuple(new), extra


def _close_children(s: State, b: OpenBlock, closings: list[Closing]) -> list[State]:
    """B1: the block graph closed, one child per way to close it (`_close_omaps`)."""
    out = []
    kernel_rank = (b.sources, TYPE_ORDER[OpKind.CUSTOMIZED])
    for omap, dangling, new, extra in closings:
        spec = BlockSpec(b.grid, b.forloop, b.inputs, b.ops, tuple(dangling), omap)
        op = KernelOp(OpKind.CUSTOMIZED, b.sources, (), spec)
        out.append(
            State(
                s.tensors + new,
                bump(s.uses, b.sources, len(new)),
                s.ops + (op,),
                kernel_rank,
                s.dmem + extra,
                None,
                (),
                f"close(omap={list(omap)})",
                s.table,
            )
        )
    return out


def _block_child(s: State, b: OpenBlock, e: Entry) -> State:
    ins, rank, kind, _, t, extra, new = e
    nb = b.grown(OpSpec(kind, ins), (t,), bump(b.uses, ins, 1), rank, b.smem + extra, b.has_macro)
    return State(s.tensors, s.uses, s.ops, s.last, s.dmem, nb, new, f"{kind}({','.join(map(str, ins))})", s.table)


_entry_new = itemgetter(ENTRY_NEW)


def _block_op_children(
    s: State, b: OpenBlock, cfg: SearchConfig, closed: list[Child], table: TableOf = block_table
) -> ChildList:
    """B1's `closed` children, then B2: one block op or accumulator over every operand tuple ranked
    above the last op, whose output fits in shared memory, then the lora macro."""
    if b.op_count >= cfg.max_block_ops:
        return _plain(closed)
    room = DEFAULT_LIMITS.smem_bytes - b.smem
    listed = table(b, cfg).listed(cfg.block_ops, b.last, room)
    news = [k.new for k in closed]
    news += map(_entry_new, listed)
    macros = macro_entries(b, room) if cfg.concat_matmul and not b.has_macro else []
    return ChildList(news, closed, listed, (s, b), macros)
