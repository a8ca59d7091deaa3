"""Tables that the rows of one block structure node share.

Rows of one node whose tensors have the same shapes (and for-loop range) have equal op and macro
tables, and the same barrenness: the same ops over the same terms (a row's block inputs have its
kernel tensors' terms, and accumulations depend on the for-loop range besides), sizes alike. A
lora node has 2.3 rows for each such set of sizes, so one expansion works each out once for them.
"""

from __future__ import annotations

from mugraph.ir.types import Shape
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.macros import MacroEntry, macro_table, table_entries
from mugraph.stages.search.op_tables import block_table
from mugraph.stages.search.state import MacroTable, OpenBlock, OpTable

__all__ = ["Sizes", "shared_macros", "shared_table"]

Sizes = tuple[int, tuple[Shape, ...]]  # a row's for-loop range and its tensors' shapes


def shared_table(shared: dict[Sizes, OpTable], sizes: Sizes, b: OpenBlock, cfg: SearchConfig) -> OpTable:
    """`block_table(b, cfg)`, made once for the rows of one node with `b`'s sizes."""
    t = b.table
    if t is not None and t.n >= len(b.tensors):
        return shared.setdefault(sizes, t)
    made = shared.get(sizes)
    if made is None:
        made = shared[sizes] = block_table(b, cfg)
    else:
        b.table = made
    return made


def shared_macros(
    shared: dict[tuple[Sizes, int], MacroTable], sizes: Sizes, b: OpenBlock, room: int
) -> list[MacroEntry]:
    """`macro_entries(b, room)`, its table made once for the rows of one node with `b`'s sizes."""
    t = b.macros
    if t is not None and t.n >= len(b.tensors):
        shared.setdefault((sizes, room), t)
    else:
        made = shared.get((sizes, room))
        if made is None:
            made = shared[(sizes, room)] = macro_table(b, room)
        else:
            b.macros = made
        t = made
    return table_entries(t, b, room)
