"""A search's block op tables: only the ops its oracle keeps (`op_tables` makes them; this judges
them once per operand tuple)."""

from __future__ import annotations

from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.judged_ops import Kept, judged_fresh
from mugraph.stages.search.op_tables import Judge, merged_block_table
from mugraph.stages.search.state import OpenBlock, OpTable

__all__ = ["BlockTables"]


class BlockTables:
    """One search's block op tables, holding only the ops whose terms its oracle (`judge`) keeps.

    A term is a function of its operands alone and a verdict of its term alone, so an op the oracle
    prunes in a graph is pruned in every graph grown from it, and the tables need not carry it:
    gqa's hold 4.5% of the entries counting would keep, lora's 9%. A chain of tables may mix these
    with unjudged ones (`expand.child_list` makes those): either kind lists every op the judge keeps,
    and the search judges what it lists in any case.

    What the ops over one operand tuple keep is settled once per search (`verdicts`), so a table
    met again costs its listing, not its verdicts. The tables themselves are not kept here: the
    rows of one node share theirs (`row_tables`), a graph grown from a row extends the row's, and
    the searcher's node caches hold the nodes a replay would meet again; a cache of tables by what
    they extend met 0.2% of lora's lookups again and cost it about 5% of its search time."""

    __slots__ = ("judge", "verdicts")

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        # What the ops over one operand tuple keep, by the operands: the judge's verdicts on
        # them, settled once per search (`judged_ops`).
        self.verdicts: dict[tuple[object, ...], Kept] = {}

    def table(self, b: OpenBlock, cfg: SearchConfig) -> OpTable:
        """`b`'s table: its own where it covers every tensor, else made by extending it."""
        t = b.table
        if t is not None and t.n >= len(b.tensors):
            return t
        fresh = judged_fresh(t, cfg, b.tensors, b.forloop, b.last, self.judge, self.verdicts)
        b.table = merged_block_table(t, cfg, len(b.tensors), b.last, fresh)
        return b.table
