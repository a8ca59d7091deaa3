"""The search tree the workers walk: a block graph's structure is one node, whatever its sizes.

A block graph's ops, their operands, consumer counts and after-accum flags (its *structure*) are
chosen the same way under every grid, imap, fmap and for-loop range; only the sizes those give its
tensors differ. So where `expand.child_list` makes one node per instantiation (and lists, builds
and judges each structure's children once per instantiation), this tree opens one node per block
input tuple holding every instantiation still valid for it (its *rows*), and a block op or macro is
one child for all the rows that list it:

- what depends on counting alone (which children can still close, `viable.BlockDebts`; whether the
  graph may close, `expand.close_dangling`) is worked out once per node;
- each row lists its own block ops and macros (validity, shapes and shared memory differ per row)
  and drops out where it is barren;
- the oracle judges every row's new terms in one batch, so a term several rows share is asked once,
  and a child keeps the rows whose terms it keeps;
- closing makes one kernel-level child per (row, omap): a plain `State`, and nothing above the block
  level changes.

The instantiated states are exactly those `child_list` explores (its open and for-loop steps
aside), so the μGraphs found are the same. A child's index is a function of the node alone: the
closings first, in row order, then block ops and macros at indices that encode their kind and
operands (so a node never lists the children that counting rules out). A node's rows depend on
the verdicts on its ancestors' terms, which are functions of the terms alone (`z3_encoding`), so
replaying a path judges each node on it again and rebuilds the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain, compress
from operator import itemgetter
from typing import Any

from mugraph.ir.limits import DEFAULT_LIMITS
from mugraph.ir.types import Dim3, OpKind
from mugraph.stages.search import candidates as C
from mugraph.stages.search.block_tables import BlockTables
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.expand import _kernel_child, _loop_children, row_closings
from mugraph.stages.search.macros import (
    MacroEntry,
    macro_entries,
    macro_grown,
    macro_label,
    macro_new,
    macro_uses,
)
from mugraph.stages.search.nodes import EMPTY, BlockNode, Expansion, Lazy, Node, node_counts
from mugraph.stages.search.op_tables import Judge, block_entries, kernel_table
from mugraph.stages.search.row_tables import Sizes, SizesId, row_classes
from mugraph.stages.search.state import (
    ENTRY_NBYTES,
    ENTRY_NEW,
    ENTRY_TENSOR,
    TYPE_ORDER,
    BlockSpec,
    Entry,
    KernelOp,
    OpenBlock,
    OpSpec,
    Rank,
    State,
    bump,
)
from mugraph.stages.search.viable import BlockDebts, KernelStep, kernel_viable

__all__ = ["block_child", "block_expansion", "kernel_expansion", "open_node"]

# Operand indices a child's index encodes: a block graph holds fewer tensors than this.
SPAN = 128
MACRO_BASE = 1 << 20  # after every block op's code: (kinds) * SPAN**2 stays below it
# Under the cost order a block node's closings still come before its block ops: a block graph
# closed now is a candidate or a kernel to build on, where its deeper growths are most of the space
# and few of them close into candidates. Among the closings, the kernel the cost model would price
# lowest comes first: its DRAM bytes over the share of the GPU's SMs its grid keeps busy.
CLOSED = -(1 << 62)
BUSY_SMS = 132  # an H100's, the cost model's default GPU
OPS_BASE = 1 << 29  # block ops and macros come after every closing child, however many rows close


# -- kernel level --------------------------------------------------------------------------------
def kernel_expansion(s: State, cfg: SearchConfig, outputs: int, judge: Judge) -> Expansion:
    """K2's pre-defined ops (as `child_list` lists them), then one block graph opened per input
    tuple; those that counting rules out (`kernel_viable`) or whose terms the oracle prunes are
    dropped. Under the cost order the openings come first, those reading more tensors first (a
    block graph can still absorb the ops left to do, a kernel op cannot), then the kernel ops, the
    fewest output bytes first."""
    if len(s.ops) >= cfg.max_kernel_ops:
        return EMPTY
    room = DEFAULT_LIMITS.dmem_bytes - s.dmem
    entries = kernel_table(s, cfg).listed(cfg.kernel_ops, s.last, room)
    options = _open_options(s, cfg)
    steps: list[KernelStep] = [(e[0], False) for e in entries]
    steps += [(sources, True) for sources, _ in options]
    viable = kernel_viable(s, steps, cfg, outputs)
    n = len(entries)
    judged = [i for i in range(n) if viable is None or viable[i]]
    terms = dict.fromkeys(chain.from_iterable(entries[i][ENTRY_NEW] for i in judged))
    keep = judge(terms) if terms else frozenset()
    kept = [i for i in judged if keep.issuperset(entries[i][ENTRY_NEW])]
    lazy = [Lazy(_kernel_child, s, entries[i]) for i in kept]
    cost = [entries[i][ENTRY_NBYTES] for i in kept]
    for j, (sources, grid) in enumerate(options):
        if viable is None or viable[n + j]:
            kept.append(n + j)
            lazy.append(Lazy(open_node, s, sources, grid, cfg))
            cost.append(-len(sources))  # adds nothing yet; the more it reads, the more it can absorb
    return Expansion(n + len(options), len(kept), kept, lazy, cost if cfg.order == "cost" else None)


def _open_options(s: State, cfg: SearchConfig) -> list[tuple[tuple[int, ...], Dim3]]:
    """K3: the input tuples a new block graph may read here (ranked above the last op), each with
    every grid it may run on."""
    if s.n_block_graphs >= cfg.max_block_graphs or len(s.ops) >= cfg.max_kernel_ops:
        return []
    order = TYPE_ORDER[OpKind.CUSTOMIZED]
    out = []
    for sources in C.block_source_options(len(s.tensors), cfg):
        if (sources, order) > s.last:
            out += [(sources, grid) for grid in C.grid_candidates([s.tensors[i].shape for i in sources], cfg)]
    return out


def open_node(s: State, sources: tuple[int, ...], grid: Dim3, cfg: SearchConfig) -> BlockNode:
    """The block graph reading `sources` on `grid`, with no op yet: one row per imaps, fmaps and
    for-loop range whose inputs fit in shared memory, in that order."""
    in_shapes = [s.tensors[i].shape for i in sources]
    rows: list[OpenBlock] = []
    for imaps in C.imap_combos(in_shapes, grid, cfg):
        rows += [k.block for k in _loop_children(s, OpenBlock(sources, grid, imaps), cfg) if k.block is not None]
    _number_sizes(rows)
    mirage = C.block_sources(len(s.tensors), cfg)
    reads = "" if sources == mirage else f"inputs={list(sources)},"
    return BlockNode(s, sources, tuple(rows), f"open({reads}grid={list(grid)})")


# -- block level ---------------------------------------------------------------------------------
def block_expansion(
    node: BlockNode, cfg: SearchConfig, outputs: int, judge: Judge, tables: BlockTables | None = None
) -> Expansion:
    """B1 (each row closed, under each omap), then B2 (block ops and the macro), for every row at
    once. A row that counting shows is barren lists nothing. Under the cost order the closings are
    explored cheapest kernel first (`_closed_cost`), still before the block ops, and the block ops
    and macros whose new term holds the most of the program (`Expr.size`) first: every op the
    oracle keeps computes a subterm of an output, and the larger its term, the fewer ops are left
    between it and a closing that is a candidate. Where the block graph reads every program input
    no kernel has read yet, it may compute the outputs itself, and closings and block ops are
    ordered together by term size (`_by_reach`). With the search's
    `tables` (made with `judge`), the rows list only block ops whose terms it keeps."""
    rows = node.rows
    if not rows:
        return EMPTY
    s, b0 = node.state, rows[0]
    if len(b0.tensors) >= SPAN - 1:
        raise ValueError(f"a block graph of {len(b0.tensors)} tensors is more than a child index can encode")
    debts, dangling = node.counts(cfg, outputs)
    open_more = b0.op_count < cfg.max_block_ops
    if _barren(b0, debts, dangling, cfg):
        return EMPTY  # no row closes, and counting rules out every child whatever the sizes
    smem = DEFAULT_LIMITS.smem_bytes
    listed = 0
    closed: list[tuple[OpenBlock, tuple[Any, ...]]] = []
    alive: list[tuple[OpenBlock, int, SizesId]] = []
    barren: dict[tuple[SizesId, int, bool], bool] = {}
    if b0.sizes_id < 0:  # rows made other than by `open_node` and the child makers
        _number_sizes(rows)
    for b in rows:
        room = smem - b.smem
        closings = list(row_closings(s, b, dangling, cfg)) if dangling is not None else []
        sizes = b.sizes_id
        if open_more:
            at = (sizes, room, bool(closings))
            dead = barren.get(at)
            if dead is None:
                dead = barren[at] = debts.barren_row(b, cfg, at[2], room)
            if dead:
                continue
        listed += len(closings)
        closed += [(b, c) for c in closings]
        alive.append((b, room, sizes))
    kept: list[int] = []
    lazy: list[Lazy] = []
    cost: list[int] | None = [] if cfg.order == "cost" else None
    if debts.closed_ok:
        kept = list(range(len(closed)))
        lazy = [Lazy(_closed_child, s, b, c) for b, c in closed]
        if cost is not None:
            reads = sum(s.tensors[i].nbytes for i in node.sources)
            cost = [CLOSED + _closed_cost(b, reads + c[3]) for b, c in closed]
    kept_rows = len(kept)
    if not open_more or not alive:
        return Expansion(listed, kept_rows, kept, lazy, cost)
    # The block ops and macros that counting keeps, listed once per class of rows that list the
    # same (`RowClass`); judged in one batch (every block op and macro makes one new term); then
    # each row joins the groups of the children its class keeps, in row order.
    classes = row_classes(alive, debts, cfg, cfg.concat_matmul and not b0.has_macro, tables)
    for rc in classes.values():
        listed += rc.listed * rc.rows
    terms = dict.fromkeys([e[ENTRY_NEW][0] for rc in classes.values() for e in rc.ops])
    terms.update(dict.fromkeys([x for rc in classes.values() for x in rc.macro_news]))
    keep = judge(terms) if terms else frozenset()
    op_groups: dict[Rank, list[tuple[OpenBlock, Entry]]] = {}
    macro_groups: dict[tuple[int, int, int, int], list[tuple[OpenBlock, MacroEntry]]] = {}
    macro_reach: dict[tuple[int, int, int, int], int] = {}  # a macro's new term's size (`Expr.size`)
    for rc in classes.values():
        rc.targets = [(op_groups.setdefault(e[1], []), e) for e in rc.ops if e[ENTRY_NEW][0] in keep]
        rc.macro_targets = []
        for m, x in zip(rc.macros, rc.macro_news, strict=True):
            if x in keep:
                rc.macro_targets.append((macro_groups.setdefault(m[0], []), m))
                macro_reach[m[0]] = x.size
    for b, room, sizes in alive:
        rc = classes[(sizes, room)]
        for group, e in rc.targets:
            group.append((b, e))
        for mgroup, m in rc.macro_targets:
            mgroup.append((b, m))
    codes = _kind_codes(cfg.block_ops)
    base = OPS_BASE
    children: list[tuple[int, Lazy, int, int]] = []  # (code, child, rows, reach)
    for ops in op_groups.values():
        operands, kind = ops[0][1][0], ops[0][1][2]
        code = codes[kind] + operands[0] * SPAN + (operands[1] + 1 if len(operands) > 1 else 0)
        reach = ops[0][1][ENTRY_NEW][0].size
        children.append((code, Lazy(_op_child, node, ops, cfg, outputs), len(ops), reach))
    for key, quads in macro_groups.items():
        a, c, d, f = key
        code = MACRO_BASE + ((a * SPAN + c) * SPAN + d) * SPAN + f
        children.append((code, Lazy(_macro_child, node, quads, cfg, outputs), len(quads), macro_reach[key]))
    children.sort(key=_first)
    for code, made, n_rows, _ in children:
        kept.append(base + code)
        lazy.append(made)
        kept_rows += n_rows
    if cost is not None:
        if _absorbs(node):
            reaches = [max(b.tensors[i].expr.size for i in c[1]) for b, c in closed] if debts.closed_ok else []
            cost = _by_reach(cost, reaches, [reach for *_, reach in children])
        else:
            cost += [-reach for *_, reach in children]
    return Expansion(listed, kept_rows, kept, lazy, cost)


def _by_reach(closed: list[int], closed_reach: list[int], op_reach: list[int]) -> list[int]:
    """Sort keys for a block graph that may still compute the outputs itself: closings and block
    ops together, the largest term first; of one size, closings first, cheapest kernel first. A
    closing whose outputs are the program's holds its whole term and comes first; one that leaves
    ops to later kernels comes after the block ops that would take the term further."""
    keys = [(-r, 0, c) for r, c in zip(closed_reach, closed, strict=True)] + [(-r, 1, 0) for r in op_reach]
    dense = {k: i for i, k in enumerate(sorted(set(keys)), start=1)}
    return [dense[k] for k in keys]


def _absorbs(node: BlockNode) -> bool:
    """Whether the block graph reads every program input no kernel has read yet: it may then
    compute the outputs itself, and closing it early leaves work to kernels after it."""
    s = node.state
    n_inputs = sum(op.kind is OpKind.INPUT for op in s.ops)
    return all(s.uses[i] > 0 or i in node.sources for i in range(n_inputs))


def _number_sizes(rows: Sequence[OpenBlock]) -> None:
    """Number the rows of one node by their sizes (for-loop range and tensor shapes: what a row's
    op tables and barrenness depend on besides its structure), in order of first appearance."""
    numbers: dict[Sizes, SizesId] = {}
    for b in rows:
        b.sizes_id = numbers.setdefault((b.forloop, tuple([t.shape for t in b.tensors])), len(numbers))


def _closed_cost(b: OpenBlock, nbytes: int) -> int:
    """A closed block graph's DRAM bytes, scaled up where its grid leaves SMs idle."""
    blocks = b.grid[0] * b.grid[1] * b.grid[2]
    return nbytes * BUSY_SMS // min(blocks, BUSY_SMS)


def block_child(node: BlockNode, index: int, cfg: SearchConfig, outputs: int, judge: Judge) -> Node | None:
    """The kept child of `node` at `index` (None where it keeps none there), made without listing
    its other children: what replaying a path needs. Its rows are those `block_expansion` gives it:
    a row that lists a child counting keeps is never barren (`block_barren` rules a row out only
    where counting rules out every child it lists), so no row needs the barren check here."""
    rows = node.rows
    if not rows:
        return None
    s, b0 = node.state, rows[0]
    debts, dangling = node.counts(cfg, outputs)
    if index < OPS_BASE:
        if not debts.closed_ok or dangling is None:
            return None
        for b in rows:
            closings = list(row_closings(s, b, dangling, cfg))
            if index < len(closings):
                return _closed_child(s, b, closings[index])
            index -= len(closings)
        return None
    if b0.op_count >= cfg.max_block_ops:
        return None
    code = index - OPS_BASE
    smem = DEFAULT_LIMITS.smem_bytes
    if code >= MACRO_BASE:
        rest, f = divmod(code - MACRO_BASE, SPAN)
        rest, d = divmod(rest, SPAN)
        a, c = divmod(rest, SPAN)
        quad = (a, c, d, f)
        if not cfg.concat_matmul or b0.has_macro or a >= len(b0.tensors):
            return None
        if not debts.macro_ok(quad, b0.tensors[a].after_accum):
            return None
        macros = [(b, m) for b in rows for m in macro_entries(b, smem - b.smem) if m[0] == quad]
        news = [macro_new(b.tensors, m)[0] for b, m in macros]
        keep = judge(dict.fromkeys(news)) if news else frozenset()
        quads = list(compress(macros, map(keep.__contains__, news)))
        return _macro_child(node, quads, cfg, outputs) if quads else None
    kind_at, rest = divmod(code, SPAN * SPAN)
    a, second = divmod(rest, SPAN)
    if kind_at >= len(cfg.block_ops):
        return None
    kind = cfg.block_ops[kind_at]
    ins = (a,) if second == 0 else (a, second - 1)
    if (ins, TYPE_ORDER[kind]) <= b0.last:
        return None
    ops = [
        (b, e)
        for b, e in zip(rows, block_entries(rows, cfg, kind, ins), strict=True)
        if e is not None and e[ENTRY_NBYTES] <= smem - b.smem
    ]
    if not ops or not debts.entry_ok(ins, ops[0][1][ENTRY_TENSOR].after_accum):
        return None
    news = [e[ENTRY_NEW][0] for _, e in ops]
    keep = judge(dict.fromkeys(news))
    kept = list(compress(ops, map(keep.__contains__, news)))
    return _op_child(node, kept, cfg, outputs) if kept else None


_first = itemgetter(0)


_CODES: dict[tuple[OpKind, ...], dict[OpKind, int]] = {}


def _kind_codes(kinds: tuple[OpKind, ...]) -> dict[OpKind, int]:
    """Each block kind's base code: its position in the kind list (the order it is listed in)."""
    codes = _CODES.get(kinds)
    if codes is None:
        if len(kinds) * SPAN * SPAN > MACRO_BASE:
            raise ValueError(f"{len(kinds)} block op kinds are more than a child index can encode")
        codes = _CODES[kinds] = {k: i * SPAN * SPAN for i, k in enumerate(kinds)}
    return codes


def _op_child(node: BlockNode, group: Sequence[tuple[OpenBlock, Entry]], cfg: SearchConfig, outputs: int) -> BlockNode:
    """The block op of `group`'s entries (one per row that keeps it), added to each of those rows
    (to the first only where the child is barren whatever its sizes: its rows are only counted)."""
    e0 = group[0][1]
    ins, rank, kind = e0[0], e0[1], e0[2]
    op = OpSpec(kind, ins)
    b0 = group[0][0]
    uses, ops, flag = bump(b0.uses, ins, 1), b0.ops + (op,), b0.has_macro
    first = b0.grown(op, (e0[ENTRY_TENSOR],), uses, rank, b0.smem + e0[ENTRY_NBYTES], flag, ops)
    return _child(
        node,
        first,
        lambda: [
            b.grown(op, (e[ENTRY_TENSOR],), uses, rank, b.smem + e[ENTRY_NBYTES], flag, ops) for b, e in group[1:]
        ],
        f"{kind}({','.join(map(str, ins))})",
        len(group),
        cfg,
        outputs,
    )


def _macro_child(
    node: BlockNode, group: Sequence[tuple[OpenBlock, MacroEntry]], cfg: SearchConfig, outputs: int
) -> BlockNode:
    """The macro of `group`'s entries added to each row that keeps it (as `_op_child`)."""
    ins = group[0][1][0]
    uses = macro_uses(group[0][0].uses, ins)
    first = macro_grown(group[0][0], group[0][1], uses)
    return _child(
        node, first, lambda: [macro_grown(b, m, uses) for b, m in group[1:]], macro_label(ins), len(group), cfg, outputs
    )


def _child(
    node: BlockNode,
    first: OpenBlock,
    rest: Callable[[], list[OpenBlock]],
    label: str,
    size: int,
    cfg: SearchConfig,
    outputs: int,
) -> BlockNode:
    """The child of `node` whose rows are `first` and those `rest` grows; where counting shows it
    barren whatever its sizes, made with `first` alone and counted with `size` rows. Either way it
    keeps what counting said of it, for its expansion."""
    counted = node_counts(node.state, first, cfg, outputs)
    if _barren(first, *counted, cfg):
        return BlockNode(node.state, node.sources, (first,), label, size, counted)
    return BlockNode(node.state, node.sources, (first, *rest()), label, -1, counted)


def _barren(b: OpenBlock, debts: BlockDebts, dangling: list[int] | None, cfg: SearchConfig) -> bool:
    """Whether every row of the node whose first row is `b` is barren by counting alone: none can
    close, and no block op or macro child can pay the debts, whatever the row's sizes."""
    return dangling is None and (b.op_count >= cfg.max_block_ops or debts.barren)


def _closed_child(s: State, b: OpenBlock, closing: tuple[Any, ...]) -> State:
    """The kernel graph with the row `b` closed under one omap (`expand.row_closings`)."""
    omap, dangling, new, extra = closing
    spec = BlockSpec(b.grid, b.forloop, b.inputs, b.ops, tuple(dangling), omap)
    label = (
        f"close(imaps={[list(m) for m in b.imaps]},fmaps={[i.fmap for i in b.inputs]},F={b.forloop},omap={list(omap)})"
    )
    return State(
        s.tensors + new,
        bump(s.uses, b.sources, len(new)),
        s.ops + (KernelOp(OpKind.CUSTOMIZED, b.sources, (), spec),),
        (b.sources, TYPE_ORDER[OpKind.CUSTOMIZED]),
        s.dmem + extra,
        None,
        (),
        label,
        s.table,
    )
