"""Budgeted depth-first exploration of one subtree of the search, named by its choice path.

The tree is `structures.py`'s: kernel-level states, and block structure nodes that carry every
instantiation (row) still valid for their structure. A node's children come in a fixed order, and a
path is the list of child indices from the root, so replaying it rebuilds the node exactly, on any
machine (the verdicts that decide a node's rows are functions of the terms alone). `explore(path,
budget)` expands that subtree depth first until `budget` instantiated states are expanded and
returns the μGraphs found (deduplicated by canonical digest), the unexplored frontier as tasks
(next first; each a subtree or a run of sibling subtrees, `task_paths`), and counters. Each node is
expanded once by exactly one call, so exploring with any budget and resubmitting every frontier
task visits the same nodes and finds the same μGraphs as one unbudgeted call.

At a node: a kernel-level node whose unconsumed tensors are as many as the reference's outputs is
a candidate, fingerprinted once; a match is recorded and not extended (Mirage's rule). Otherwise
its children are listed, those that counting shows can never reach a candidate are dropped, the
oracle judges the rest's new terms in one batch, and the kept children are pushed.

The walk runs with Python's cyclic collector paused (`collector.py`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from mugraph.arrays.backend import ArrayModule
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import IRError, MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import digest as graph_digest
from mugraph.ir.serialize import dumps, loads
from mugraph.ir.types import OpKind
from mugraph.stages.prune.expr import output_exprs, var
from mugraph.stages.prune.oracle import OracleConfig, SubexprOracle, Verdict, VerdictMemo
from mugraph.stages.prune.outputs import OutputForms, terms_exact
from mugraph.stages.search.block_tables import BlockTables
from mugraph.stages.search.build import build_graph
from mugraph.stages.search.collector import collector_paused
from mugraph.stages.search.config import SearchConfig, check_eps, for_reference, reference_eps
from mugraph.stages.search.lru import WeightedLRU
from mugraph.stages.search.nodes import BlockNode, Expansion, Lazy, Node
from mugraph.stages.search.state import State, root_state
from mugraph.stages.search.structures import block_child, block_expansion, kernel_expansion
from mugraph.stages.search.task_paths import Path, Run, ranked_frontier, show, split_run
from mugraph.stages.verify.check import ReferenceFingerprints

# Which nodes the search explores. A run store's frontier names nodes of one tree, so a store made
# under another version is not resumed. 2: children that counting shows cannot reach a candidate
# (`viable.py`) are dropped with the oracle's verdicts. 3: a block graph's structure is one node for
# all its grids, maps and for-loop ranges (`structures.py`). 4: a node's kept children are explored
# in the config's `order` (the least DRAM traffic first), and a sibling run follows that order.
# 5: a program of one input may open a block graph on it (`block_sources`).
SEARCH_TREE = "5"


class SearchPathError(MugraphError):
    """A path that names no node of this search tree."""


@dataclass(slots=True)
class SearchCounters:
    """What one exploration did; counters of several explorations add up."""

    nodes: int = 0  # instantiated states: a block structure node counts once per row
    structures: int = 0  # nodes of the search tree
    kernel_nodes: int = 0
    block_nodes: int = 0
    children: int = 0  # listed children (order, shape and memory checks; block ops only with kept terms)
    pruned: int = 0  # children the oracle pruned
    candidates: int = 0  # kernel graphs with as many unconsumed tensors as outputs
    fingerprints: int = 0  # candidates fingerprinted (output shapes, and normal forms where exact, matched)
    fingerprint_seconds: float = 0.0
    verified: int = 0  # fingerprint matches, before deduplication
    ir_rejects: int = 0  # complete candidates the IR refused (a search bug if ever > 0)
    oracle_queries: int = 0
    prefiltered: int = 0
    memo_hits: int = 0
    solver_calls: int = 0
    solver_seconds: float = 0.0
    # Verdicts left undecided (Z3's unknowns, or a normal form past its budget), each time a
    # query is asked, by what the oracle's policy did with them.
    undecided_kept: int = 0
    undecided_pruned: int = 0
    seconds: float = 0.0

    def add(self, other: SearchCounters) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Found:
    """A verified μGraph: canonical digest, the path that reached it, and its canonical JSON."""

    digest: str
    path: Path
    graph: str

    def kernel_graph(self) -> KernelGraph:
        return loads(self.graph)


@dataclass(slots=True)
class ExploreResult:
    path: Path
    found: dict[str, Found]
    frontier: list[Path]
    counters: SearchCounters = field(default_factory=SearchCounters)
    ranks: list[int] = field(default_factory=list)  # each frontier task's rank below `path` (`task_paths`)
    # Where each found μGraph was first verified in this walk: wall-clock seconds (`time.time`, which
    # the driver's clock shares on one machine), so a run records when a find was made, not when it
    # was committed.
    found_at: dict[str, float] = field(default_factory=dict)
    # Stopped at its deadline, not by its budget: the finds so far, no frontier. Such a walk is not a
    # task's result; its task stays pending and runs again whole.
    cut: bool = False


NORM_EPS_KINDS = (OpKind.RMS_NORM, OpKind.ACCUM_RMS, OpKind.LAYER_NORM)


class Fragment:
    """A search problem: a reference program (a LAX fragment) and the config to search it with."""

    def __init__(self, reference: KernelGraph, config: SearchConfig, name: str = "fragment") -> None:
        self.name = name
        self.reference = reference
        # The reference's layer_norms and norm eps, which the search must be able to make (plans
        # that called `for_reference` with the eps already have them; this makes every caller so).
        check_eps(config, reference.ops)
        norm_kinds = {op.kind for op in reference.ops} & {OpKind.LAYER_NORM}
        self.config = for_reference(config, norm_kinds, reference_eps(reference.ops))
        config = self.config
        sig = reference.input_signature()
        self.input_names = [n for n, _, _ in sig]
        self.input_dtypes = [d for _, _, d in sig]
        self.norm_eps = {k: config.eps_of(k) for k in NORM_EPS_KINDS if config.eps_of(k)}
        self.output_names = [str(op.attr("name")) for op in reference.ops_of(OpKind.OUTPUT)]
        self.output_shapes = sorted(t.shape for t in reference.output_tensors)
        self.finals = output_exprs(reference)
        self.root = root_state([(s, d) for _, s, d in sig], [var(i) for i in range(len(sig))])
        self.reference_digest = graph_digest(reference)
        self.digest = hashlib.sha256(f"{self.reference_digest}|{config.digest}".encode()).hexdigest()[:32]


# What a searcher keeps for the next task (`lru.py`), at most this weight in each of two caches: the
# rows of the nodes replayed paths went through, and the nodes listed (for a run's parent, or left
# open by a walk) with their rows and children. Enough where tasks run depth first, each taking up
# the frontier the last one left (`serial.run_search`); a worker taking tasks in the driver's order
# by rank starts most tasks elsewhere in the tree and gains from holding more (`pipeline.worker`
# sizes its searchers' caches by its memory).
CACHE_WEIGHT = 65_536


class Searcher:
    """Explores subtrees of one fragment; holds the oracle and reference fingerprints, which a
    worker builds once and reuses for every task."""

    def __init__(
        self,
        fragment: Fragment,
        memo: VerdictMemo | None = None,
        oracle: SubexprOracle | None = None,
        xp: ArrayModule = np,
        cache_weight: int = CACHE_WEIGHT,
    ) -> None:
        self.fragment = fragment
        cfg = fragment.config
        self.oracle = oracle or SubexprOracle(
            fragment.finals,
            len(fragment.input_names),
            OracleConfig(cfg.rlimit, True, cfg.unknown_keeps, cfg.oracle, cfg.grow_only),
            memo,
        )
        self.fingerprints = ReferenceFingerprints(fragment.reference, cfg.seeds, xp=xp)
        kinds = {*cfg.kernel_ops, *cfg.block_ops, *(op.kind for op in fragment.reference.ops)}
        self.outputs = OutputForms(fragment.finals, terms_exact(fragment.finals, kinds))
        self.tables = BlockTables(self.oracle.kept)  # block op tables, judged once per operand tuple
        # Listed nodes with their expansions, weighed by both (a kept child holds its parent).
        self._kids: WeightedLRU[Path, tuple[Node, Expansion]] = WeightedLRU(cache_weight, _listed_weight)
        self._nodes: WeightedLRU[Path, Node] = WeightedLRU(cache_weight, _rows)  # replayed nodes
        # The stack the last exploration stopped with: its frontier's nodes, which the size
        # estimate probes right after (`estimate.py`) without replaying their paths.
        self._frontier: dict[Path, Node | Lazy] = {}

    @property
    def cache_weight(self) -> int:
        """The weight each of the searcher's two caches holds at most (`CACHE_WEIGHT`)."""
        return self._nodes.limit

    def resize_caches(self, weight: int) -> None:
        """Let each cache hold at most `weight` from now on (the least recently used go first)."""
        self._nodes.resize(max(1, weight))
        self._kids.resize(max(1, weight))

    # -- paths -------------------------------------------------------------------------------
    def expansion(self, node: Node) -> Expansion:
        """`node`'s children: listed, ruled out by counting, judged by the oracle."""
        cfg, outputs = self.fragment.config, len(self.fragment.output_names)
        if isinstance(node, BlockNode):
            return block_expansion(node, cfg, outputs, self.oracle.kept, self.tables)
        return kernel_expansion(node, cfg, outputs, self.oracle.kept)

    def _children_cached(self, path: Path, node: Node) -> Expansion:
        listed = self._kids.get(path)
        if listed is not None:
            return listed[1]
        kids = self.expansion(node)
        self._kids.put(path, (node, kids))
        return kids

    def replay(self, path: Sequence[int]) -> Node:
        """The node named by `path`, rebuilt step by step: each node on it is expanded and judged
        again (its rows are those its ancestors' verdicts kept; the verdicts are the same ones)."""
        node: Node = self.fragment.root
        cfg, outputs = self.fragment.config, len(self.fragment.output_names)
        nodes = self._nodes
        for depth, idx in enumerate(path):
            key = tuple(path[: depth + 1])
            child: Node | None = nodes.get(key)
            if child is not None:  # the first steps of most tasks' paths are the same few nodes
                node = child
                continue
            listed = self._kids.get(key[:-1]) if isinstance(node, BlockNode) else None
            if listed is not None:  # listed already (a walk left its children on its frontier)
                at = listed[1].position(idx)
                child = None if at is None else listed[1].lazy[at].build()
            elif isinstance(node, BlockNode):  # its one child, not its whole expansion
                child = block_child(node, idx, cfg, outputs, self.oracle.kept) if idx >= 0 else None
            else:
                child = self._children_cached(tuple(path[:depth]), node).child(idx)
            if child is None:
                raise SearchPathError(
                    f"path {list(path)}: step {depth} chooses child {idx}, but that node keeps no such child"
                )
            nodes.put(key, child)
            node = child
        return node

    def find_path(self, labels: Sequence[str]) -> Path:
        """The path whose choices have these labels (as `describe` prints them), through kept children."""
        node: Node = self.fragment.root
        path = Path()
        for label in labels:
            kids = self._children_cached(path, node)
            for i, lazy in zip(kids.kept, kids.lazy, strict=True):
                child = lazy.build()
                if child.label == label:
                    path, node = path + (i,), child
                    break
            else:
                raise SearchPathError(f"after {list(path)} no kept choice is labelled {label!r}")
        return path

    def describe(self, path: Sequence[int]) -> list[str]:
        """The choices along a path, readable (`matmul(0,1)`, `close(grid=[...],...)`, ...)."""
        return [self.replay(path[: depth + 1]).label for depth in range(len(path))]

    # -- verification ------------------------------------------------------------------------
    def verify(self, state: State, path: Path) -> Found | None:
        """The μGraph a kernel-level `state` is, where it is a candidate that matches the reference."""
        verdict = self._verify(state, path, SearchCounters())
        return verdict if isinstance(verdict, Found) else None

    def _verify(self, state: State, path: Path, counters: SearchCounters) -> Found | bool | None:
        """None: not a candidate. False: a candidate that failed. A Found: a verified μGraph."""
        frag = self.fragment
        dangling = state.unconsumed()
        if len(dangling) != len(frag.output_names):
            return None
        counters.candidates += 1
        if sorted(state.tensors[i].shape for i in dangling) != frag.output_shapes:
            return False
        if self.outputs.differ([state.tensors[i].expr for i in dangling]):
            return False
        counters.fingerprints += 1
        t0 = time.perf_counter()
        try:
            names = [f"o{i}" for i in range(len(dangling))]
            graph = build_graph(
                state, frag.input_names, dangling, names, frag.config.rdx, frag.norm_eps, frag.input_dtypes
            )
            perm = self.fingerprints.match(graph)
            if perm is None:
                return False
            ordered = [dangling[perm[i]] for i in range(len(dangling))]
            graph = build_graph(
                state, frag.input_names, ordered, frag.output_names, frag.config.rdx, frag.norm_eps, frag.input_dtypes
            )
        except IRError:
            counters.ir_rejects += 1
            return False
        finally:
            counters.fingerprint_seconds += time.perf_counter() - t0
        counters.verified += 1
        return Found(canonical_digest(graph), path, dumps(graph))

    # -- exploration -------------------------------------------------------------------------
    def _task_stack(self, task: Path) -> tuple[list[tuple[Path, Node | Lazy]], list[int]]:
        """The exploration stack a task starts from: its node, or the kept siblings of its run
        (their parent expanded and judged again; that node's expansion counted them); with each
        entry's rank (its place in the run)."""
        run = split_run(task)
        if run is None:
            return [(task, self.node(task))], [0]
        parent = run.parent
        kids, kept = self.kept_children(parent)
        at = _covered(kids, run)
        if at is None:
            raise SearchPathError(f"task {show(task)}: its first or last child is not a kept child of {list(parent)}")
        return [(parent + (kept[j],), kids.lazy[j]) for j in reversed(at)], [j - at.start for j in reversed(at)]

    def kept_children(self, path: Path) -> tuple[Expansion, list[int]]:
        """A node's children and the indices of those the search explores."""
        kids = self._children_cached(path, self.replay(path))
        return kids, kids.kept

    def node(self, path: Path) -> Node:
        """The node at `path`: from the frontier the last exploration left (where it is one of its
        nodes), else replayed."""
        top = self._frontier.get(path)
        if top is None:
            return self.replay(path)
        if isinstance(top, Lazy):
            top = self._frontier[path] = top.build()
        return top

    def run_members(self, run: Run) -> list[Path]:
        """The paths of a sibling run's nodes: from the last exploration's frontier where they are
        on it, else from the parent's children."""
        # The frontier holds a parent's unexplored kept children in exploration order, next last.
        members = [p for p in reversed(self._frontier) if p[:-1] == run.parent]
        ends = [p[-1] for p in members]
        if ends and ends[0] == run.first and (run.last is None or run.last in ends):
            return members if run.last is None else members[: ends.index(run.last) + 1]
        kids, kept = self.kept_children(run.parent)
        return [(*run.parent, kept[j]) for j in _covered(kids, run) or ()]

    def explore(
        self, path: Sequence[int] = (), budget: int | None = None, deadline: float | None = None
    ) -> ExploreResult:
        """Depth-first over the subtree (or sibling run) named by `path`, expanding at most
        `budget` nodes; at the wall-clock `deadline` (`time.time`), cut: the finds so far, no
        frontier (`ExploreResult.cut`)."""
        if budget is not None and budget < 1:
            raise MugraphError(f"budget {budget} must be at least 1 node")
        t0 = time.perf_counter()
        o0 = self.oracle.counters
        before = (o0.queries, o0.prefiltered, o0.memo_hits, o0.solver_calls, o0.solver_seconds, o0.verdicts["U"])
        start = tuple(path)
        counters = SearchCounters()
        with collector_paused():
            stack, ranks = self._task_stack(start)
            opened: list[_Opened | None] = [None] * len(stack)
            walk = _Walk(budget, deadline)
            self._walk(stack, ranks, opened, walk, counters)
            self._keep_open(opened)
        self._frontier = dict(stack)
        o1 = self.oracle.counters
        counters.oracle_queries = o1.queries - before[0]
        counters.prefiltered = o1.prefiltered - before[1]
        counters.memo_hits = o1.memo_hits - before[2]
        counters.solver_calls = o1.solver_calls - before[3]
        counters.solver_seconds = o1.solver_seconds - before[4]
        undecided = o1.verdicts["U"] - before[5]
        if self.oracle.keeps(Verdict.UNKNOWN):
            counters.undecided_kept = undecided
        else:
            counters.undecided_pruned = undecided
        counters.seconds = time.perf_counter() - t0
        if walk.cut:
            return ExploreResult(start, walk.found, [], counters, [], walk.found_at, cut=True)
        tasks, task_ranks = ranked_frontier([p for p, _ in reversed(stack)], ranks[::-1])
        return ExploreResult(start, walk.found, tasks, counters, task_ranks, walk.found_at)

    def _walk(
        self,
        stack: list[tuple[Path, Node | Lazy]],
        ranks: list[int],
        opened: list[_Opened | None],
        walk: _Walk,
        counters: SearchCounters,
    ) -> None:
        """Depth first from `stack` (popped from its end) until it is empty or the walk's budget of
        states is expanded or its deadline passed; what is left on it is the frontier. `ranks` runs
        beside `stack`: each entry's rank, its parent's plus its place in exploration order
        (`task_paths`); so does `opened`: the expansion each entry came from (None for the task's
        own entries), with a count of its children still on the stack."""
        found, found_at, budget, deadline = walk.found, walk.found_at, walk.budget, walk.deadline
        while stack and (budget is None or counters.nodes < budget):
            if deadline is not None and time.time() >= deadline:
                walk.cut = True
                return
            p, top = stack.pop()
            rank = ranks.pop()
            parent = opened.pop()
            if parent is not None:
                parent.waiting -= 1
            node = top.build() if isinstance(top, Lazy) else top
            counters.structures += 1
            if isinstance(node, BlockNode):
                counters.nodes += node.size
                counters.block_nodes += node.size
            else:
                counters.nodes += 1
                counters.kernel_nodes += 1
                verdict = self._verify(node, p, counters)
                if isinstance(verdict, Found):
                    if verdict.digest not in found:
                        found[verdict.digest] = verdict
                        found_at[verdict.digest] = time.time()
                    continue
            kids = self.expansion(node)
            counters.children += kids.listed
            counters.pruned += kids.listed - kids.kept_rows
            if not kids.kept:
                continue
            stack.extend(zip([p + (i,) for i in reversed(kids.kept)], reversed(kids.lazy), strict=True))
            ranks.extend(range(rank + len(kids.kept) - 1, rank - 1, -1))
            opened.extend([_Opened(p, node, kids)] * len(kids.kept))

    def _keep_open(self, opened: list[_Opened | None]) -> None:
        """Keep the nodes and expansions whose children a walk left on its frontier: the next
        task on this worker is often one of those children or a run of them (serially, always
        the next one), and would otherwise replay its parent's path and list its children again."""
        for o in dict.fromkeys(o for o in opened if o is not None and o.waiting):
            self._nodes.put(o.path, o.node)
            self._kids.put(o.path, (o.node, o.kids))


@dataclass(slots=True)
class _Walk:
    """What bounds one walk (its budget of states, its wall-clock deadline) and what it found."""

    budget: int | None
    deadline: float | None
    found: dict[str, Found] = field(default_factory=dict)
    found_at: dict[str, float] = field(default_factory=dict)  # wall-clock seconds of each find
    cut: bool = False  # stopped at the deadline


class _Opened:
    """A node a walk expanded, its expansion, and how many of its kept children are still on the
    walk's stack (identity-hashed: one per expansion)."""

    __slots__ = ("kids", "node", "path", "waiting")

    def __init__(self, path: Path, node: Node, kids: Expansion) -> None:
        self.path = path
        self.node = node
        self.kids = kids
        self.waiting = len(kids.kept)


def _covered(kids: Expansion, run: Run) -> range | None:
    """The positions, in exploration order, of the kept children a sibling run covers: from its
    first child on, to its last if it names one (None where either is not a kept child)."""
    first = kids.position(run.first)
    last = len(kids.kept) - 1 if run.last is None else kids.position(run.last)
    if first is None or last is None or last < first:
        return None
    return range(first, last + 1)


def _listed_weight(listed: tuple[Node, Expansion]) -> int:
    return _rows(listed[0]) + len(listed[1].lazy)


def _rows(node: Node) -> int:
    return len(node.rows) if isinstance(node, BlockNode) else 1


def explore(
    fragment: Fragment, path: Sequence[int] = (), budget: int | None = None, memo: VerdictMemo | None = None
) -> ExploreResult:
    """One-shot form of `Searcher(fragment, memo).explore(path, budget)`."""
    return Searcher(fragment, memo).explore(path, budget)
