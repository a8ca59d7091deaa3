"""The search tree's nodes and a node's children as the walk sees them: records the expansions
(`structures`) make and the walk (`explore`), the probes (`estimate`) and the tests read.

A kernel-level node is a plain `State`; a block graph under construction is a `BlockNode`, one
node for every instantiation (row) of its structure. A node's kept children are an `Expansion`: their
indices in the order the search explores them, each made only when reached (`Lazy`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.expand import close_dangling
from mugraph.stages.search.state import OpenBlock, State
from mugraph.stages.search.viable import BlockDebts

__all__ = ["EMPTY", "BlockNode", "Counted", "Expansion", "Lazy", "Node", "node_counts"]


# What counting says of a block structure node, for all its rows: its debts, and the tensors it
# would close with (None: it cannot close).
Counted = tuple[BlockDebts, list[int] | None]


def node_counts(s: State, b: OpenBlock, cfg: SearchConfig, outputs: int) -> Counted:
    """What counting says of the node of kernel graph `s` whose first row is `b`."""
    return BlockDebts(s, b, cfg, outputs), close_dangling(b, cfg)


class BlockNode:
    """A block graph under construction as a structure: `state` the kernel graph it belongs to,
    `rows` its instantiations (each an `OpenBlock` with its own grid, maps, for-loop range,
    tensors and tables; all with the same ops, uses and flags), `size` how many states they are.
    A node that counting shows barren whatever its sizes (`BlockDebts.barren`) lists nothing, so
    it is made with its first row only and counted with `size` rows."""

    __slots__ = ("counted", "label", "rows", "size", "sources", "state")

    def __init__(
        self,
        state: State,
        sources: tuple[int, ...],
        rows: tuple[OpenBlock, ...],
        label: str,
        size: int = -1,
        counted: Counted | None = None,
    ) -> None:
        self.state = state
        self.sources = sources
        self.rows = rows
        self.label = label
        self.size = len(rows) if size < 0 else size
        self.counted = counted  # what counting says of it, where its maker worked that out

    def counts(self, cfg: SearchConfig, outputs: int) -> Counted:
        """Its debts and dangling tensors (the same for every row), worked out once."""
        if self.counted is None:
            self.counted = node_counts(self.state, self.rows[0], cfg, outputs)
        return self.counted

    def instance(self, row: OpenBlock) -> State:
        """The instantiated state that `row` of this node is (`expand.child_list`'s tree)."""
        s = self.state
        return State(s.tensors, s.uses, s.ops, s.last, s.dmem, row, (), self.label, s.table)


Node = State | BlockNode


class Lazy:
    """A kept child, made when the search reaches it (most are never reached within a budget)."""

    __slots__ = ("_args", "_make")

    def __init__(self, make: Callable[..., Node], *args: Any) -> None:
        self._make = make
        self._args = args

    def build(self) -> Node:
        return self._make(*self._args)


class Expansion:
    """A node's children as the search walks them: how many instantiated children its rows listed
    (`listed`), how many of those it keeps (`kept_rows`), and the indices of the kept children in
    the order the search explores them, each with the way to make it.

    Where `cost` is given (a sort key per kept child, from what the cost model can say of it before
    it is made: `kernel_expansion` and `block_expansion` give it under the config's cost order), the
    children are explored lowest first, ties in listing order. The children, and so the whole
    space and every μGraph in it, stay the same; only when each is reached changes."""

    __slots__ = ("_at", "_made", "kept", "kept_rows", "lazy", "listed")

    def __init__(
        self, listed: int, kept_rows: int, kept: list[int], lazy: list[Lazy], cost: list[int] | None = None
    ) -> None:
        if cost is not None and any(cost):
            order = sorted(range(len(kept)), key=cost.__getitem__)  # stable: ties in listing order
            kept = [kept[j] for j in order]
            lazy = [lazy[j] for j in order]
        self.listed = listed
        self.kept_rows = kept_rows
        self.kept = kept
        self.lazy = lazy
        self._made: dict[int, Node] = {}
        self._at: dict[int, int] | None = None

    def position(self, index: int) -> int | None:
        """Where the kept child at `index` comes in the exploration order (None: not kept)."""
        if self._at is None:
            self._at = {i: j for j, i in enumerate(self.kept)}
        return self._at.get(index)

    def child(self, index: int) -> Node | None:
        """The kept child at `index` (made once: a replayed path meets the same node, with the
        tables its rows have built), or None where none is kept there."""
        node = self._made.get(index)
        if node is None:
            at = self.position(index)
            if at is None:
                return None
            node = self._made[index] = self.lazy[at].build()
        return node


EMPTY = Expansion(0, 0, [], [])
