"""A search's block op tables: only the ops its oracle keeps, each table made once for every graph
that needs it (`op_tables` makes them; this keeps them)."""

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

    And a search meets the same block graph again and again: under kernel graphs that differ only in
    what it does not read, and on every path that replays it (over half of gqa's tables). So each
    table is made once, keyed by the table it extends (by identity: the key holds it, so its id is
    not reused) and what the extension reads: the new tensors' terms (by identity), shapes and
    flags, the for-loop range and the last op's rank. One search's config and oracle serve every
    key. Emptied when it holds `limit` tables."""

    __slots__ = ("judge", "limit", "made", "verdicts")

    def __init__(self, judge: Judge, limit: int = 1 << 16) -> None:
        self.judge = judge
        self.limit = limit
        self.made: dict[tuple[object, ...], OpTable] = {}
        # What the ops over one operand tuple keep, by the operands: the judge's verdicts on
        # them, settled once per search (`judged_ops`).
        self.verdicts: dict[tuple[object, ...], Kept] = {}

    def table(self, b: OpenBlock, cfg: SearchConfig) -> OpTable:
        """`b`'s table, made or found."""
        t = b.table
        if t is not None and t.n >= len(b.tensors):
            return t
        start = 0 if t is None else t.n
        if len(b.tensors) == start + 1:  # most: a child of a block op, one tensor new
            x = b.tensors[start]
            key: tuple[object, ...] = (t, b.forloop, b.last, x.expr, x.shape, x.after_accum)
        else:
            key = (t, b.forloop, b.last, *[(x.expr, x.shape, x.after_accum) for x in b.tensors[start:]])
        made = self.made.get(key)
        if made is None:
            if len(self.made) >= self.limit:
                self.made.clear()
            fresh = judged_fresh(t, cfg, b.tensors, b.forloop, b.last, self.judge, self.verdicts)
            made = self.made[key] = merged_block_table(t, cfg, len(b.tensors), b.last, fresh)
        b.table = made
        return made
