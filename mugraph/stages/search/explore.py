"""Budgeted depth-first exploration of one subtree of the search, named by its choice path.

A node's children are listed by `expand.children` (fixed order, independent of the oracle); a path
is the list of child indices from the root, so replaying it rebuilds the node exactly, on any
machine. `explore(path, budget)` expands at most `budget` nodes of that subtree depth first and
returns the μGraphs found (deduplicated by canonical digest), the unexplored frontier as tasks
(next first; each a subtree or a run of sibling subtrees, `task_paths`), and counters. Each node is
expanded once by exactly one call, so exploring with any budget and resubmitting every frontier
task visits the same nodes and finds the same μGraphs as one unbudgeted call.

At a node: a kernel-level node whose unconsumed tensors are as many as the reference's outputs is
a candidate, fingerprinted once; a match is recorded and not extended (Mirage's rule). Otherwise
its children are listed, a child that counting shows can never reach a candidate is dropped
(`ChildList.viable`), the oracle judges the rest's new terms in one batch, and the kept children
are pushed.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import chain, compress

import numpy as np

from mugraph.arrays.backend import ArrayModule
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import IRError, MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import digest as graph_digest
from mugraph.ir.serialize import dumps, loads
from mugraph.ir.types import OpKind
from mugraph.stages.prune.expr import Expr, output_exprs, var
from mugraph.stages.prune.oracle import OracleConfig, SubexprOracle, VerdictMemo
from mugraph.stages.search.build import build_graph
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.expand import Child, ChildList, child_list
from mugraph.stages.search.state import State, root_state
from mugraph.stages.search.task_paths import Path, frontier_tasks, show, split_run
from mugraph.stages.verify.check import ReferenceFingerprints

# Which nodes the search explores. A run store's frontier names nodes of one tree, so a store made
# under another version is not resumed. 2: children that counting shows cannot reach a candidate
# (`viable.py`) are dropped with the oracle's verdicts.
SEARCH_TREE = "2"


class SearchPathError(MugraphError):
    """A path that names no node of this search tree."""


@dataclass(slots=True)
class SearchCounters:
    """What one exploration did; counters of several explorations add up."""

    nodes: int = 0
    kernel_nodes: int = 0
    block_nodes: int = 0
    children: int = 0  # listed children (they passed the order, shape and memory checks)
    pruned: int = 0  # children the oracle pruned
    candidates: int = 0  # kernel graphs with as many unconsumed tensors as outputs
    fingerprints: int = 0  # candidates fingerprinted (output shapes matched)
    fingerprint_seconds: float = 0.0
    verified: int = 0  # fingerprint matches, before deduplication
    ir_rejects: int = 0  # complete candidates the IR refused (a search bug if ever > 0)
    oracle_queries: int = 0
    prefiltered: int = 0
    memo_hits: int = 0
    solver_calls: int = 0
    solver_seconds: float = 0.0
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


class Fragment:
    """A search problem: a reference program (a LAX fragment) and the config to search it with."""

    def __init__(self, reference: KernelGraph, config: SearchConfig, name: str = "fragment") -> None:
        self.name = name
        self.reference = reference
        self.config = config
        sig = reference.input_signature()
        self.input_names = [n for n, _, _ in sig]
        self.output_names = [str(op.attr("name")) for op in reference.ops_of(OpKind.OUTPUT)]
        self.output_shapes = sorted(t.shape for t in reference.output_tensors)
        self.finals = output_exprs(reference)
        self.root = root_state([(s, d) for _, s, d in sig], [var(i) for i in range(len(sig))])
        self.reference_digest = graph_digest(reference)
        self.digest = hashlib.sha256(f"{self.reference_digest}|{config.digest}".encode()).hexdigest()[:32]


class Searcher:
    """Explores subtrees of one fragment; holds the oracle and reference fingerprints, which a
    worker builds once and reuses for every task."""

    def __init__(
        self,
        fragment: Fragment,
        memo: VerdictMemo | None = None,
        oracle: SubexprOracle | None = None,
        xp: ArrayModule = np,
    ) -> None:
        self.fragment = fragment
        cfg = fragment.config
        self.oracle = oracle or SubexprOracle(
            fragment.finals, len(fragment.input_names), OracleConfig(cfg.rlimit, True, cfg.unknown_keeps), memo
        )
        self.fingerprints = ReferenceFingerprints(fragment.reference, cfg.seeds, xp=xp)
        self._kids: OrderedDict[Path, ChildList] = OrderedDict()

    # -- paths -------------------------------------------------------------------------------
    def _children_cached(self, path: Path, state: State) -> ChildList:
        kids = self._kids.get(path)
        if kids is None:
            kids = child_list(state, self.fragment.config)
            self._kids[path] = kids
            if len(self._kids) > 64:
                self._kids.popitem(last=False)
        else:
            self._kids.move_to_end(path)
        return kids

    def replay(self, path: Sequence[int]) -> State:
        """The node named by `path`, rebuilt step by step (no oracle needed: the path's choices
        were kept when it was made)."""
        state = self.fragment.root
        for depth, idx in enumerate(path):
            kids = self._children_cached(tuple(path[:depth]), state)
            if not (isinstance(idx, int) and 0 <= idx < len(kids)):
                raise SearchPathError(
                    f"path {list(path)}: step {depth} chooses child {idx}, but that node has {len(kids)} children"
                )
            state = kids[idx].build()
        return state

    def find_path(self, labels: Sequence[str]) -> Path:
        """The path whose choices have these labels (as `describe` prints them)."""
        state, path = self.fragment.root, Path()
        for label in labels:
            kids = self._children_cached(path, state)
            built = [k.build() for k in kids]
            found = [i for i, k in enumerate(built) if k.label == label]
            if not found:
                raise SearchPathError(f"after {list(path)} no choice is labelled {label!r}")
            path, state = path + (found[0],), built[found[0]]
        return path

    def describe(self, path: Sequence[int]) -> list[str]:
        """The choices along a path, readable (`matmul(0,1)`, `close(omap=[1,-1,-1])`, ...)."""
        state = self.fragment.root
        out = []
        for depth, idx in enumerate(path):
            state = self._children_cached(tuple(path[:depth]), state)[idx].build()
            out.append(state.label)
        return out

    # -- verification ------------------------------------------------------------------------
    def _verify(self, state: State, path: Path, counters: SearchCounters) -> Found | bool | None:
        """None: not a candidate. False: a candidate that failed. A Found: a verified μGraph."""
        frag = self.fragment
        dangling = state.unconsumed()
        if len(dangling) != len(frag.output_names):
            return None
        counters.candidates += 1
        if sorted(state.tensors[i].shape for i in dangling) != frag.output_shapes:
            return False
        counters.fingerprints += 1
        t0 = time.perf_counter()
        try:
            names = [f"o{i}" for i in range(len(dangling))]
            graph = build_graph(state, frag.input_names, dangling, names, self.fragment.config.rdx)
            perm = self.fingerprints.match(graph)
            if perm is None:
                return False
            ordered = [dangling[perm[i]] for i in range(len(dangling))]
            graph = build_graph(state, frag.input_names, ordered, frag.output_names, self.fragment.config.rdx)
        except IRError:
            counters.ir_rejects += 1
            return False
        finally:
            counters.fingerprint_seconds += time.perf_counter() - t0
        counters.verified += 1
        return Found(canonical_digest(graph), path, dumps(graph))

    # -- exploration -------------------------------------------------------------------------
    def _kept(self, kids: ChildList) -> list[int]:
        """Indices of the children that counting does not rule out (`ChildList.viable`) and whose
        new terms the oracle keeps (one batch for all of them)."""
        if kids.barren:
            return []
        viable = kids.viable(self.fragment.config, len(self.fragment.output_names))
        if viable is None:
            judged: Sequence[int] = range(len(kids))
            news = kids.news
        else:  # a child ruled out is not judged (its index and terms dropped, in C loops)
            judged = list(compress(range(len(kids)), viable))
            news = kids.news_at(judged)
        terms = dict.fromkeys(chain.from_iterable(news))
        keep: set[Expr] | frozenset[Expr] = self.oracle.kept(terms) if terms else frozenset()
        return list(compress(judged, map(keep.issuperset, news)))  # all its terms kept

    def _task_stack(self, task: Path) -> list[tuple[Path, State | Child]]:
        """The exploration stack a task starts from: its node, or the kept siblings of its run
        (their parent's children listed and judged again; that node's expansion counted them)."""
        run = split_run(task)
        if run is None:
            return [(task, self.replay(task))]
        parent, first = run
        kids, kept = self.kept_children(parent)
        kept = [i for i in kept if i >= first]
        if not kept or kept[0] != first:
            raise SearchPathError(f"task {show(task)}: child {first} of {list(parent)} is not a kept child")
        return [(parent + (i,), kids[i]) for i in reversed(kept)]

    def kept_children(self, path: Path) -> tuple[ChildList, list[int]]:
        """A node's children and the indices of those the oracle keeps."""
        kids = self._children_cached(path, self.replay(path))
        return kids, self._kept(kids)

    def explore(self, path: Sequence[int] = (), budget: int | None = None) -> ExploreResult:
        """Depth-first over the subtree (or sibling run) named by `path`, expanding at most
        `budget` nodes."""
        if budget is not None and budget < 1:
            raise MugraphError(f"budget {budget} must be at least 1 node")
        t0 = time.perf_counter()
        o0 = self.oracle.counters
        before = (o0.queries, o0.prefiltered, o0.memo_hits, o0.solver_calls, o0.solver_seconds)
        start = tuple(path)
        counters = SearchCounters()
        found: dict[str, Found] = {}
        stack = self._task_stack(start)
        outputs = len(self.fragment.output_names)
        while stack and (budget is None or counters.nodes < budget):
            p, top = stack.pop()
            s = top.build() if isinstance(top, Child) else top
            counters.nodes += 1
            if s.block is None:
                counters.kernel_nodes += 1
                verdict = self._verify(s, p, counters)
                if isinstance(verdict, Found):
                    found.setdefault(verdict.digest, verdict)
                    continue
            else:
                counters.block_nodes += 1
            kids = child_list(s, self.fragment.config, outputs)
            if kids.barren:
                continue  # nothing below it: its children are never listed
            counters.children += len(kids)
            kept = self._kept(kids)
            counters.pruned += len(kids) - len(kept)
            stack.extend((p + (i,), kids[i]) for i in reversed(kept))
        o1 = self.oracle.counters
        counters.oracle_queries = o1.queries - before[0]
        counters.prefiltered = o1.prefiltered - before[1]
        counters.memo_hits = o1.memo_hits - before[2]
        counters.solver_calls = o1.solver_calls - before[3]
        counters.solver_seconds = o1.solver_seconds - before[4]
        counters.seconds = time.perf_counter() - t0
        return ExploreResult(start, found, frontier_tasks([p for p, _ in reversed(stack)]), counters)


def explore(
    fragment: Fragment, path: Sequence[int] = (), budget: int | None = None, memo: VerdictMemo | None = None
) -> ExploreResult:
    """One-shot form of `Searcher(fragment, memo).explore(path, budget)`."""
    return Searcher(fragment, memo).explore(path, budget)
