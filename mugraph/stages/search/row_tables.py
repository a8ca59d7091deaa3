"""Tables that the rows of one block structure node share.

Rows of one node whose tensors have the same shapes (and for-loop range) have equal op and macro
tables, and the same barrenness: the same ops over the same terms (a row's block inputs have its
kernel tensors' terms, and accumulations depend on the for-loop range besides), sizes alike. A
lora node has 2.3 rows for each such set of sizes, so one expansion works each out once for them,
and lists, filters and judges their block-op and macro children once (`RowClass`).
"""

from __future__ import annotations

from mugraph.ir.types import Shape
from mugraph.stages.prune.expr import Expr
from mugraph.stages.search.block_tables import BlockTables
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.macros import MacroEntry, macro_new, macro_table, table_entries
from mugraph.stages.search.op_tables import block_table
from mugraph.stages.search.state import ENTRY_TENSOR, Entry, MacroTable, OpenBlock, OpTable
from mugraph.stages.search.viable import BlockDebts

__all__ = ["RowClass", "Sizes", "SizesId", "row_classes", "shared_macro_table", "shared_table"]

Sizes = tuple[int, tuple[Shape, ...]]  # a row's for-loop range and its tensors' shapes
SizesId = int  # a node's number for one `Sizes` of its rows (the tables below key on it)


def shared_table(
    shared: dict[SizesId, OpTable], sizes: SizesId, b: OpenBlock, cfg: SearchConfig, tables: BlockTables | None = None
) -> OpTable:
    """`b`'s block op table (the search's `tables`, else `op_tables.block_table`), made once for
    the rows of one node with `b`'s sizes."""
    t = b.table
    if t is not None and t.n >= len(b.tensors):
        return shared.setdefault(sizes, t)
    made = shared.get(sizes)
    if made is None:
        made = shared[sizes] = block_table(b, cfg) if tables is None else tables.table(b, cfg)
    else:
        b.table = made
    return made


def shared_macro_table(
    shared: dict[tuple[SizesId, int], MacroTable], sizes: SizesId, b: OpenBlock, room: int
) -> MacroTable:
    """`macro_table(b, room)`, made once for the rows of one node with `b`'s sizes and room."""
    t = b.macros
    if t is not None and t.n >= len(b.tensors):
        shared.setdefault((sizes, room), t)
        return t
    made = shared.get((sizes, room))
    if made is None:
        made = shared[(sizes, room)] = macro_table(b, room)
    else:
        b.macros = made
    return made


class RowClass:
    """What every row of one node with the same sizes and shared memory left lists: as many
    children (`listed`), the block-op and macro entries counting keeps (with the macros' new
    terms), and once the oracle has judged them, each kept entry beside the group of the child it
    makes (`targets`, `macro_targets`). Worked out for the class's first row; every row of the
    class adds itself to the same groups, in row order."""

    __slots__ = ("listed", "macro_news", "macro_targets", "macros", "ops", "rows", "targets")

    def __init__(self, listed: int, ops: list[Entry], macros: list[MacroEntry], macro_news: list[Expr]) -> None:
        self.listed = listed
        self.rows = 0
        self.ops = ops
        self.macros = macros
        self.macro_news = macro_news
        self.targets: list[tuple[list[tuple[OpenBlock, Entry]], Entry]] = []
        self.macro_targets: list[tuple[list[tuple[OpenBlock, MacroEntry]], MacroEntry]] = []


def row_classes(
    alive: list[tuple[OpenBlock, int, SizesId]],
    debts: BlockDebts,
    cfg: SearchConfig,
    with_macros: bool,
    tables: BlockTables | None = None,
) -> dict[tuple[SizesId, int], RowClass]:
    """The classes of a node's rows (each with its shared memory left and sizes, numbered) that list the
    same children, by sizes and room, in the order of their first rows; each row gets its class's
    tables (so the graphs grown from it extend them), from the search's `tables` where given."""
    classes: dict[tuple[SizesId, int], RowClass] = {}
    shared: dict[SizesId, OpTable] = {}
    macro_tables: dict[tuple[SizesId, int], MacroTable] = {}
    ok: dict[object, bool] = {}
    some_ops, some_macros, all_ops = debts.some_entry_ok, debts.some_macro_ok, debts.every_entry_ok
    for b, room, sizes in alive:
        table = shared_table(shared, sizes, b, cfg, tables)
        macros = shared_macro_table(macro_tables, sizes, b, room) if with_macros else None
        c = classes.get((sizes, room))
        if c is None:
            entries = table.listed(cfg.block_ops, b.last, room)
            n = len(entries)
            if all_ops:
                good = entries
            elif some_ops:  # else every block-op child is ruled out by counting: only counted
                good = [e for e in entries if _entry_ok(ok, debts, e)]
            else:
                good = []
            good_m: list[MacroEntry] = []
            news: list[Expr] = []
            if macros is not None:
                found = table_entries(macros, b, room)
                n += len(found)
                if some_macros:
                    for m in found:
                        ins = m[0]
                        fine = ok.get(ins)
                        if fine is None:
                            fine = ok[ins] = debts.macro_ok(ins, b.tensors[ins[0]].after_accum)
                        if fine:
                            good_m.append(m)
                            news.append(macro_new(b.tensors, m)[0])
            c = classes[(sizes, room)] = RowClass(n, good, good_m, news)
        c.rows += 1
    return classes


def _entry_ok(cache: dict[object, bool], debts: BlockDebts, e: Entry) -> bool:
    """`debts.entry_ok` for the entry `e`, cached by its rank (the same child in every row)."""
    good = cache.get(e[1])
    if good is None:
        good = cache[e[1]] = debts.entry_ok(e[0], e[ENTRY_TENSOR].after_accum)
    return good
