"""A node of the search tree: an immutable μGraph prefix, cheap to extend and to share.

A state holds what extending it needs (each tensor's shape, abstract expression, after-accum flag
and consumer count; the last op's canonical rank; memory used) plus the op specs that rebuild the
real IR graph (`build.py`) once a candidate is complete. Children share their parent's tuples, so
a deep stack of states costs little.

Canonical order (Mirage's `Order`, paper §4.1): an op's rank is (its input tensor indices, its
kind's position in `TYPE_ORDER`), compared lexicographically with a shorter prefix smaller; a new
op must rank strictly above the last op of its graph, and input ops rank lowest.

The records below are never changed once made, but are not frozen dataclasses: a frozen
dataclass sets each field through object.__setattr__, five times the cost of a plain slots
record, and the search makes millions of them.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice
from math import prod
from typing import Final

from mugraph.ir.types import Dim3, DType, OpKind, Shape
from mugraph.stages.prune.expr import Expr

TYPE_ORDER: dict[OpKind, int] = {k: i for i, k in enumerate(OpKind)}
CONCAT_MATMUL_ORDER = len(TYPE_ORDER)  # the lora macro ranks after every single op
Rank = tuple[tuple[int, ...], int]
INPUT_RANK: Rank = ((), TYPE_ORDER[OpKind.INPUT])
Attrs = tuple[tuple[str, int | tuple[int, ...]], ...]


@functools.lru_cache(maxsize=1 << 14)
def shape_nbytes(shape: Shape) -> int:
    """Bytes of a tensor of this shape: searches run in fp16, as Mirage's."""
    return prod(shape) * 2


@dataclass(slots=True, unsafe_hash=True)
class TInfo:
    shape: Shape
    expr: Expr
    after_accum: bool = False

    @property
    def nbytes(self) -> int:
        return shape_nbytes(self.shape)


# One op a graph's tensors admit, in its op table (op_tables.py): a plain tuple whose fields are read
# at the named positions below (or unpacked). The search builds one per valid operand tuple of every
# graph prefix; built as a slots record or a NamedTuple they cost 4% or 7% more of the search's own
# instructions (valgrind, the first 20,000 states), the tuple read at named positions about 1%.
Entry = tuple[tuple[int, ...], Rank, OpKind, Attrs, TInfo, int, tuple[Expr, ...]]
ENTRY_INS: Final = 0  # operand tensor indices
ENTRY_RANK: Final = 1
ENTRY_KIND: Final = 2
ENTRY_ATTRS: Final = 3
ENTRY_TENSOR: Final = 4  # the tensor it makes
ENTRY_NBYTES: Final = 5  # memory it adds
ENTRY_NEW: Final = 6  # its new terms (the oracle must keep them all)


class OpTable:
    """Per kind of an op list (same order): the valid entries over the first `n` tensors, sorted
    by operand tuple, their operand tuples alone (for bisecting on a rank), and the most memory
    any of them adds (so a node with room for all lists them without checking each).

    A small block table also holds all its entries in one list, kind by kind (`flat`): a search's
    judged tables hold five entries on average over thirteen kinds, where one pass over the
    entries costs less than a bisect per kind. Its entries' ranks are (operands, the kind's rank
    order), so the pass compares each entry's rank with the last op's."""

    __slots__ = ("big", "entries", "flat", "keys", "n")

    def __init__(
        self,
        n: int,
        keys: tuple[list[tuple[int, ...]], ...],
        entries: tuple[list[Entry], ...],
        big: tuple[int, ...],
        flat: list[Entry] | None = None,
    ) -> None:
        self.n = n
        self.keys = keys
        self.entries = entries
        self.big = big
        self.flat = flat

    def listed(self, kinds: tuple[OpKind, ...], last: Rank, room: int) -> list[Entry]:
        """The entries ranked above `last` that add at most `room` bytes, kind by kind."""
        flat = self.flat
        if flat is not None:  # ENTRY_RANK and ENTRY_NBYTES, read at literal positions in the pass
            return [e for e in flat if e[1] > last and e[5] <= room]
        out: list[Entry] = []
        last_ins, last_order = last
        left, right = bisect.bisect_left, bisect.bisect_right
        for order, keys, entries, big in zip(_orders(kinds), self.keys, self.entries, self.big, strict=True):
            start = left(keys, last_ins)  # `first_above`, inlined: a node asks once per kind
            n = len(keys)
            if start < n and order <= last_order and keys[start] == last_ins:
                start = right(keys, last_ins, start)
            if start == n:
                continue
            if big <= room:
                out += entries[start:] if start else entries
            else:
                out += [e for e in islice(entries, start, None) if e[ENTRY_NBYTES] <= room]
        return out


# One lora macro a block graph's tensors admit (`macros.py`): (operands (a, b, c, d), shared memory
# it adds, the `MacroOperands`). A plain tuple read at named positions, as `Entry` is. Its terms are
# made only for a child that is judged or built (`macros.macro_terms`): most are ruled out first.
MacroEntry = tuple[tuple[int, int, int, int], int, "MacroOperands"]
# What a macro needs of its operands' shapes: (operands, the left concatenation's, the right one's
# and the product's shapes, the shared memory of the three, a's size along the last dim, c's along
# dim -2).
MacroOperands = tuple[tuple[int, int, int, int], Shape, Shape, Shape, int, int, int]


class MacroTable:
    """The lora macro's quadruples over a block graph's first `n` tensors (`macros.macro_table`),
    each with its terms, sorted by operands: `keys` (for bisecting on a rank), `entries` and the
    most shared memory any adds. With what extending it to more tensors needs: the concatenable
    tensors grouped by shape and flag (`groups`, along the last dim and along dim -2), and the
    pairs made so far grouped by what the matmul needs of them (`lefts`, `rights`). Never
    changed once made: a child graph's table is its parent's extended."""

    __slots__ = ("big", "entries", "groups", "keys", "lefts", "n", "rights")

    def __init__(
        self,
        n: int,
        groups: tuple[dict[tuple[object, ...], tuple[int, ...]], dict[tuple[object, ...], tuple[int, ...]]],
        lefts: dict[tuple[object, ...], tuple[tuple[int, int, Shape], ...]],
        rights: dict[tuple[object, ...], tuple[tuple[int, int, Shape], ...]],
        keys: list[tuple[int, ...]],
        entries: list[MacroEntry],
        big: int,
    ) -> None:
        self.n = n
        self.groups = groups
        self.lefts = lefts
        self.rights = rights
        self.keys = keys
        self.entries = entries
        self.big = big


@functools.cache
def _orders(kinds: tuple[OpKind, ...]) -> tuple[int, ...]:
    return tuple(TYPE_ORDER[k] for k in kinds)


def first_above(keys: Sequence[tuple[int, ...]], order: int, last: Rank) -> int:
    """In `keys` (sorted operand tuples of ops of one rank order), the index of the first whose
    rank (tuple, order) is above `last`: a tuple equal to the last op's ranks above it only if
    its order does."""
    last_ins, last_order = last
    start = bisect.bisect_left(keys, last_ins)
    if start < len(keys) and keys[start] == last_ins and order <= last_order:
        start = bisect.bisect_right(keys, last_ins, start)
    return start


@dataclass(slots=True, unsafe_hash=True)
class BlockInput:
    source: int  # kernel tensor index
    imap: Dim3
    fmap: int


@dataclass(slots=True, unsafe_hash=True)
class OpSpec:
    """One op as the search chose it (either level). `kind` CONCAT with 4 inputs is the macro."""

    kind: OpKind
    inputs: tuple[int, ...]
    attrs: Attrs = ()


@dataclass(slots=True, unsafe_hash=True)
class BlockSpec:
    grid: Dim3
    forloop: int
    inputs: tuple[BlockInput, ...]
    ops: tuple[OpSpec, ...]
    outputs: tuple[int, ...]  # block tensor indices, in output order
    omap: Dim3


@dataclass(slots=True, unsafe_hash=True)
class KernelOp:
    kind: OpKind
    inputs: tuple[int, ...]
    attrs: Attrs = ()
    block: BlockSpec | None = None


@dataclass(slots=True, unsafe_hash=True)
class OpenBlock:
    """A block graph being built. Until `inputs` is set, only the grid and imaps are chosen."""

    sources: tuple[int, ...]
    grid: Dim3
    imaps: tuple[Dim3, ...]
    forloop: int = 1
    inputs: tuple[BlockInput, ...] = ()
    ops: tuple[OpSpec, ...] = ()
    tensors: tuple[TInfo, ...] = ()
    uses: tuple[int, ...] = ()
    last: Rank = INPUT_RANK
    smem: int = 0
    has_macro: bool = False
    # The block ops its tensors admit (`op_tables.block_table`): made when first listed, or the
    # parent's, to be extended. A cache, so not part of the graph's identity.
    table: OpTable | None = field(default=None, compare=False, hash=False, repr=False)
    # What closing it leaves the kernel graph (`viable.py`): the unconsumed kernel tensors besides
    # its outputs, and how many the kernel ops after it can consume. The same for every node of one
    # block graph, so worked out once and passed on, as `table`.
    outlook: tuple[int, int] | None = field(default=None, compare=False, hash=False, repr=False)
    # The lora macros its tensors admit (`macros.macro_table`), as `table`.
    macros: MacroTable | None = field(default=None, compare=False, hash=False, repr=False)
    # Its sizes' number among the rows of its structure node (`structures.py`): rows of one node
    # have the same number exactly where they have the same for-loop range and tensor shapes. Set
    # when the node is opened and passed on: a child's new tensors' shapes follow from its
    # parent's sizes, so the parent's numbering numbers the children too. -1: not numbered.
    sizes_id: int = field(default=-1, compare=False, hash=False, repr=False)

    @property
    def configured(self) -> bool:
        return bool(self.inputs)

    def grown(
        self,
        op: OpSpec,
        new: tuple[TInfo, ...],
        uses: tuple[int, ...],
        last: Rank,
        smem: int,
        has_macro: bool,
        ops: tuple[OpSpec, ...] | None = None,
    ) -> OpenBlock:
        """This block graph with one more op, which appends the tensors `new` (its table is
        passed on, to be extended, and so is its sizes' number). `ops`: its ops with `op`, where
        the caller grows many rows of one structure alike and made them once."""
        return OpenBlock(
            self.sources,
            self.grid,
            self.imaps,
            self.forloop,
            self.inputs,
            self.ops + (op,) if ops is None else ops,
            self.tensors + new,
            uses,
            last,
            smem,
            has_macro,
            self.table,
            self.outlook,
            self.macros,
            self.sizes_id,
        )

    @property
    def op_count(self) -> int:
        """Ops counted against max_block_ops: inputs and computed ops (a macro counts as one)."""
        return len(self.inputs) + len(self.ops)


@dataclass(slots=True, unsafe_hash=True)
class State:
    tensors: tuple[TInfo, ...]
    uses: tuple[int, ...]
    ops: tuple[KernelOp, ...]
    last: Rank
    dmem: int
    block: OpenBlock | None = None
    new: tuple[Expr, ...] = ()  # terms the last step created: the oracle must keep them all
    label: str = "root"
    # The kernel ops its tensors admit (`op_tables.kernel_table`), as OpenBlock.table.
    table: OpTable | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def n_block_graphs(self) -> int:
        return sum(op.kind is OpKind.CUSTOMIZED for op in self.ops)

    def unconsumed(self) -> list[int]:
        return [i for i, u in enumerate(self.uses) if u == 0]


def root_state(inputs: list[tuple[Shape, DType]], exprs: list[Expr]) -> State:
    tensors = tuple(TInfo(shape, e) for (shape, _), e in zip(inputs, exprs, strict=True))
    ops = tuple(KernelOp(OpKind.INPUT, (), (("input", i),)) for i in range(len(inputs)))
    return State(tensors, (0,) * len(tensors), ops, INPUT_RANK, sum(t.nbytes for t in tensors))


def bump(uses: tuple[int, ...], used: tuple[int, ...], extra: int) -> tuple[int, ...]:
    """Consumer counts after an op reading `used` and creating `extra` new tensors."""
    out = list(uses)
    for i in used:
        out[i] += 1
    return tuple(out) + (0,) * extra
