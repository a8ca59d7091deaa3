"""Children listed from the op tables, checked at many nodes of every benchmark's search tree.

Two independent checks: a table a node extended from its parent's equals the table built from
scratch over its tensors, and the children listed equal the direct enumeration (every kind, every
operand tuple ranked above the last op, valid shape, memory that fits) that the tables replace.
"""

from __future__ import annotations

import itertools

import pytest

from mugraph.ir import shapes
from mugraph.ir.errors import IRError
from mugraph.ir.limits import DEFAULT_LIMITS
from mugraph.ir.types import ACCUMULATORS, COMMUTATIVE_OPS, IN_PLACE_BLOCK_OPS, OpKind
from mugraph.programs import get_builtin
from mugraph.stages.search.config import SearchConfig, preset_config
from mugraph.stages.search.expand import child_list
from mugraph.stages.search.explore import Fragment
from mugraph.stages.search.op_results import arity, fast_shape, operand_tuples
from mugraph.stages.search.op_tables import block_table, kernel_table
from mugraph.stages.search.state import (
    CONCAT_MATMUL_ORDER,
    ENTRY_NBYTES,
    ENTRY_RANK,
    TYPE_ORDER,
    OpTable,
    Rank,
    State,
    shape_nbytes,
)


def ranked_tuples(kind: OpKind, n: int, last: Rank) -> list[tuple[int, ...]]:
    """The operand tuples whose rank (tuple, kind) is above `last`, compared one by one."""
    return [ins for ins in operand_tuples(kind, n) if (ins, TYPE_ORDER[kind]) > last]


def _direct_block_ops(s: State, cfg: SearchConfig) -> list[str]:
    b = s.block
    assert b is not None
    if b.op_count >= cfg.max_block_ops:
        return []
    out = []
    for kind in cfg.block_ops:
        accum = kind in ACCUMULATORS
        for ins in ranked_tuples(kind, len(b.tensors), b.last):
            args = [b.tensors[i] for i in ins]
            if (len(args) == 2 and args[0].after_accum != args[1].after_accum) or (accum and args[0].after_accum):
                continue
            if kind in ACCUMULATORS:
                try:
                    shape = shapes.accumulator(kind, args[0].shape, cfg.rdx)
                except IRError:
                    continue
            else:
                found = fast_shape(kind, args[0].shape, args[1].shape if len(args) == 2 else None)
                if found is None:
                    continue
                shape = found
            extra = 0 if kind in IN_PLACE_BLOCK_OPS else 2 * _size(shape)
            if b.smem + extra <= DEFAULT_LIMITS.smem_bytes:
                out.append(f"{kind}({','.join(map(str, ins))})")
    return out


def _direct_kernel_ops(s: State, cfg: SearchConfig) -> list[str]:
    if len(s.ops) >= cfg.max_kernel_ops:
        return []
    out = []
    for kind in cfg.kernel_ops:
        for ins in ranked_tuples(kind, len(s.tensors), s.last):
            args = [s.tensors[i] for i in ins]
            dims = [d for d, n in enumerate(args[0].shape) if n > 1] if kind is OpKind.REDUCTION else [None]
            for dim in dims:
                if dim is None:
                    shape = fast_shape(kind, args[0].shape, args[1].shape if len(args) == 2 else None)
                else:
                    shape = shapes.reduction(args[0].shape, dim)
                if shape is not None and s.dmem + 2 * _size(shape) <= DEFAULT_LIMITS.dmem_bytes:
                    out.append(f"{kind}({','.join(map(str, ins))}{'' if dim is None else f';{dim}'})")
    return out


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _direct_macros(s: State, cfg: SearchConfig) -> list[str]:
    """lora's concat-then-matmul children, every quadruple of distinct block tensors tried in order."""
    b = s.block
    assert b is not None
    if not cfg.concat_matmul or b.has_macro:
        return []
    out = []
    for ins in itertools.product(range(len(b.tensors)), repeat=4):
        if len(set(ins)) < 4 or (ins, CONCAT_MATMUL_ORDER) <= b.last:
            continue
        ta, tb, tc, td = (b.tensors[i] for i in ins)
        x, y, z, w = ta.shape, tb.shape, tc.shape, td.shape
        if len({t.after_accum for t in (ta, tb, tc, td)}) > 1 or len({len(x), len(y), len(z), len(w)}) > 1:
            continue
        if len(z) < 2 or x[:-1] != y[:-1] or z[:-2] != w[:-2] or z[-1] != w[-1]:
            continue
        left, right = x[:-1] + (x[-1] + y[-1],), z[:-2] + (z[-2] + w[-2], z[-1])
        product = fast_shape(OpKind.MATMUL, left, right)
        if product is None:
            continue
        if b.smem + shape_nbytes(left) + shape_nbytes(right) + shape_nbytes(product) <= DEFAULT_LIMITS.smem_bytes:
            out.append(f"concat_matmul({','.join(map(str, ins))})")
    return out


def _op_labels(s: State, cfg: SearchConfig) -> list[str]:
    """The labels of the listed children that add one op (not open, loop, close or macro)."""
    skip = ("open(", "loop(", "close(", "concat_matmul(")
    return [lab for k in child_list(s, cfg) if not (lab := k.build().label).startswith(skip)]


def _live(table: OpTable, cfg: SearchConfig, last: Rank) -> OpTable:
    """A block table's entries ranked above `last`: those a graph whose last op has that rank, or
    any graph grown from it, can list (a table made along a path may still hold older ones)."""
    keys, entries = [], []
    for kind, k, e in zip(cfg.block_ops, table.keys, table.entries, strict=True):
        live = [j for j, ins in enumerate(k) if (ins, TYPE_ORDER[kind]) > last]
        assert live == list(range(live[0] if live else len(k), len(k))), "sorted by rank"
        keys.append([k[j] for j in live])
        entries.append([e[j] for j in live])
    return OpTable(table.n, tuple(keys), tuple(entries), table.big)


@pytest.mark.parametrize("name", ["rms_norm", "lora", "gated_mlp", "gqa"])
def test_tables_and_listings_match_the_direct_enumeration(name: str) -> None:
    prog = get_builtin(name)
    cfg = preset_config(prog.preset).with_overrides(
        {"kernel_ops": [*preset_config(prog.preset).kernel_ops, "reduction"]}
    )
    root = Fragment(prog.reference(), cfg, name).root
    # Depth first, keeping every third child, and closing block graphs after three ops, so that
    # both levels are visited many times.
    stack, seen, checked, macros = [root], 0, {"kernel": 0, "block": 0}, 0
    while stack and seen < 1500:
        s = stack.pop()
        seen += 1
        kids = child_list(s, cfg)
        table: OpTable | None = None
        fresh: OpTable | None = None
        if s.block is None:
            assert _op_labels(s, cfg) == _direct_kernel_ops(s, cfg)
            table, fresh = kernel_table(s, cfg), kernel_table(State(s.tensors, s.uses, s.ops, s.last, s.dmem), cfg)
            checked["kernel"] += 1
        elif s.block.configured:
            assert _op_labels(s, cfg) == _direct_block_ops(s, cfg)
            macro_labels = [lab for k in kids if (lab := k.build().label).startswith("concat_matmul(")]
            assert macro_labels == _direct_macros(s, cfg)
            b = s.block
            clone = type(b)(
                b.sources, b.grid, b.imaps, b.forloop, b.inputs, b.ops, b.tensors, b.uses, b.last, b.smem, b.has_macro
            )
            table, fresh = _live(block_table(b, cfg), cfg, b.last), _live(block_table(clone, cfg), cfg, b.last)
            checked["block"] += 1
        if table is not None and fresh is not None:
            assert (table.n, table.keys, table.entries) == (fresh.n, fresh.keys, fresh.entries)
            assert all(x >= y for x, y in zip(table.big, fresh.big, strict=True))  # an upper bound
        built = [k.build() for k in kids]
        # A ChildList lists its children's new terms up front and makes a Child per index asked.
        assert [k.new for k in kids] == kids.news and len(built) == len(kids)
        if built:
            assert kids[-1].build().label == built[-1].label and kids[-len(kids)].build().label == built[0].label
        with pytest.raises(IndexError):
            kids[len(kids)]
        macros += sum(k.label.startswith("concat_matmul(") for k in built)
        if s.block is not None and s.block.configured and len(s.block.ops) >= 3:
            built = [k for k in built if k.label.startswith("close(")]  # back to the kernel level
        stack.extend(k for i, k in reversed(list(enumerate(built))) if i % 3 == 0)
    assert checked["kernel"] > 100 and checked["block"] > 300, checked
    assert (macros > 0) == preset_config(prog.preset).concat_matmul  # lora's macro children, after the entries


STRUCTURAL = {OpKind.INPUT, OpKind.OUTPUT, OpKind.CUSTOMIZED}


def test_operand_arity_agrees_with_the_ir() -> None:
    """One pair per operand set exactly for the kinds the IR calls commutative (the canonical digest
    sorts their operands); the kinds the search makes itself have no operand tuples."""
    assert {k for k in set(OpKind) - STRUCTURAL if arity(k) == "commutative"} == COMMUTATIVE_OPS
    for kind in STRUCTURAL:
        with pytest.raises(ValueError, match="makes"):
            arity(kind)


@pytest.mark.parametrize("kind", sorted(ACCUMULATORS | STRUCTURAL | {OpKind.REDUCTION, OpKind.CONCAT}))
def test_fast_shape_refuses_kinds_whose_shape_needs_more(kind: OpKind) -> None:
    with pytest.raises(ValueError, match="needs its attributes"):
        fast_shape(kind, (4, 8), None)


@pytest.mark.parametrize("name", ["rms_norm", "lora"])
def test_a_small_tables_one_list_lists_what_its_per_kind_lists_do(name: str) -> None:
    """A small block table's one-list listing (`OpTable.flat`) gives the entries, in the order, that
    bisecting its per-kind lists gives, for the rank of every op it holds and its last op's, and
    rooms at and around its entries' sizes."""
    prog = get_builtin(name)
    cfg = preset_config(prog.preset)
    stack, seen, checked = [Fragment(prog.reference(), cfg, name).root], 0, 0
    while stack and seen < 600:
        s = stack.pop()
        seen += 1
        b = s.block
        if b is not None and b.configured:
            table = block_table(b, cfg)
            if table.flat is not None:
                per_kind = OpTable(table.n, table.keys, table.entries, table.big)
                assert per_kind.flat is None
                entries = [e for es in table.entries for e in es]
                assert table.flat == entries
                sizes = {e[ENTRY_NBYTES] for e in entries}
                rooms = sorted(sizes | {x - 1 for x in sizes} | {0, DEFAULT_LIMITS.smem_bytes})
                for last in [b.last, *[e[ENTRY_RANK] for e in entries]]:
                    for room in rooms:
                        assert table.listed(cfg.block_ops, last, room) == per_kind.listed(cfg.block_ops, last, room)
                checked += 1
        built = [k.build() for k in child_list(s, cfg)]
        if b is not None and b.configured and len(b.ops) >= 3:
            built = [k for k in built if k.label.startswith("close(")]
        stack.extend(k for i, k in reversed(list(enumerate(built))) if i % 3 == 0)
    assert checked > 50, checked
