"""Why an expert μGraph is, or is not, in the configured search space.

The search tree is walked depth first through the states that are prefixes of the expert
(`expert_target`): at each one its children are listed exactly as the search lists them, those
that build part of the expert are kept, and the oracle judges only those. Reaching the complete
expert gives its path ("at root choice N"). Otherwise the deepest state where no listed
child continues the expert is the first choice that excludes it, and the rule that left the
expert's next step out is named with the setting that would admit it: grid, imaps, fmaps,
for-loop range, block inputs, op counts, op kinds, omaps, canonical order, memory, or the
oracle's verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import COMMUTATIVE_OPS, Dim3, OpKind
from mugraph.stages.prune.oracle import Verdict
from mugraph.stages.search import candidates as C
from mugraph.stages.search.config import ConfigError, SearchConfig
from mugraph.stages.search.expand import child_list, describe_instances
from mugraph.stages.search.expert_target import (
    BlockTarget,
    KernelStep,
    Sig,
    Target,
    block_sigs,
    kernel_sigs,
    normalise_imap,
    target_of,
)
from mugraph.stages.search.explore import Searcher
from mugraph.stages.search.state import TYPE_ORDER, State
from mugraph.stages.search.structure_labels import structure_labels
from mugraph.stages.search.task_paths import Path

WALK_LIMIT = 20_000  # states visited before the walk gives up (many orders of one expert)


class ExplanationJSON(TypedDict):
    """`Explanation` as `mugraph explain --json` prints it (`reason` is the one-line reason)."""

    expert: str
    inside: bool
    rule: str | None
    reason: str
    setting: str | None
    path: list[int]
    labels: list[str]
    root_choice: int | None


@dataclass
class Explanation:
    """What `explain` says of one expert: inside (with its path) or the rule that excludes it."""

    expert: str
    inside: bool
    rule: str = ""  # "grid", "for-loop range", "block inputs", "op count", "oracle", ...
    reason: str = ""  # one line for people
    setting: str | None = None  # a `--set KEY=VALUE` that would admit the expert, if one would
    path: Path = ()  # inside: the expert's path; outside: the path of the excluding node
    labels: list[str] = field(default_factory=list)

    @property
    def root_choice(self) -> int | None:
        return self.path[0] if self.inside and self.path else None

    def line(self) -> str:
        """The one-line reason `search` prints beside "expert not found"."""
        if self.inside:
            return (
                f"inside the space, at root choice {self.root_choice} "
                f"(path {list(self.path)}); the oracle keeps every step"
            )
        if self.rule == "not equivalent":
            return f"not equivalent to the reference ({self.reason}); the search finds only equivalent μGraphs"
        fix = f"; --set '{self.setting}' would admit it" if self.setting else ""
        return f"outside the space ({self.rule}): {self.reason}{fix}"

    def missed_reason(self, complete: bool) -> str:
        """Why a search that did not find the expert missed it: where the expert lies inside the space,
        a search stopped at its time limit has not reached it yet (not a contradiction to print)."""
        if self.inside and not complete:
            return f"the search stopped at its time limit; it lies {self.line()}"
        return self.line()

    def missed_line(self, complete: bool) -> str:
        """What `optimize` and `search` print after the expert's name when their search missed it."""
        verdict = "not found yet" if self.inside and not complete else "NOT found"
        return f"{verdict}: {self.missed_reason(complete)}"

    def as_json(self) -> ExplanationJSON:
        return {
            "expert": self.expert,
            "inside": self.inside,
            "rule": self.rule or None,
            "reason": self.line(),
            "setting": self.setting,
            "path": list(self.path),
            "labels": self.labels,
            "root_choice": self.root_choice,
        }


@dataclass
class _DeadEnd:
    depth: int
    path: Path
    rule: str
    reason: str
    setting: str | None


def _setting_list(name: str, values: Sequence[Any], extra: Any) -> str:
    """`name=[...]` with `extra` appended, as JSON (maps as lists)."""

    def plain(v: Any) -> Any:
        return [plain(x) for x in v] if isinstance(v, tuple | list) else getattr(v, "value", v)

    items = [plain(v) for v in values] + [plain(extra)]
    return f"{name}={items}".replace("'", '"').replace(" ", "")


class _Walk:
    def __init__(self, searcher: Searcher, target: Target, digest: str) -> None:
        self.s = searcher
        self.cfg: SearchConfig = searcher.fragment.config
        self.t = target
        self.digest = digest
        self.best: _DeadEnd | None = None
        self.names = searcher.fragment.input_names

    # -- which children continue the expert ------------------------------------------------------
    def _block_of(self, state: State, ks: Sequence[Sig]) -> BlockTarget | None:
        """The expert's block graph an open block of `state` is building, if any."""
        b = state.block
        assert b is not None
        for step in self.t.steps:
            bt = step.block
            if bt is None or bt.grid != b.grid:
                continue
            srcs = sorted((ks[src], normalise_imap(m, b.grid)) for src, m in zip(b.sources, b.imaps, strict=True))
            if srcs != sorted((src, m) for src, m, _ in bt.inputs):
                continue
            if not b.configured:
                return bt
            if b.forloop != bt.forloop and any(f >= 0 for _, _, f in bt.inputs):
                continue
            if set(block_sigs(b, ks)) <= bt.sigs:
                return bt
        return None

    def continues(self, state: State) -> bool:
        ks = kernel_sigs(state)
        if not set(ks) <= self.t.sigs:
            return False
        return state.block is None or self._block_of(state, ks) is not None

    def complete(self, state: State) -> bool:
        return state.block is None and set(kernel_sigs(state)) == self.t.sigs

    # -- the walk ----------------------------------------------------------------------------------
    def run(self) -> Path | None:
        stack: list[tuple[Path, State]] = [((), self.s.fragment.root)]
        visited = 0
        while stack and visited < WALK_LIMIT:
            path, state = stack.pop()
            visited += 1
            if self.complete(state):
                if self._matches(path, state) == self.digest:
                    return path
                self._dead(
                    path,
                    "candidate",
                    "the search builds the expert's graph but its outputs do not "
                    "match the reference's (output count, shapes, terms or fingerprint)",
                    None,
                )
                continue
            if path and state.block is None and self._stops_here(path, state):
                continue
            kids = child_list(state, self.cfg)
            good = [(i, k) for i, k in ((i, kids[i].build()) for i in range(len(kids))) if self.continues(k)]
            terms = {e for _, k in good for e in k.new}
            keep = self.s.oracle.kept(terms) if terms else set()
            kept = [(i, k) for i, k in good if keep.issuperset(k.new)]
            if kept:
                stack.extend((path + (i,), k) for i, k in reversed(kept))
            elif good:
                self._oracle(path, good)
            else:
                self._diagnose(path, state)
        return None

    def _stops_here(self, path: Path, state: State) -> bool:
        """Mirage's rule: a complete candidate that matches is recorded and not extended."""
        frag = self.s.fragment
        dangling = state.unconsumed()
        if len(dangling) != len(frag.output_names):
            return False
        if sorted(state.tensors[i].shape for i in dangling) != frag.output_shapes:
            return False
        if self._matches(path, state) is None:
            return False
        self._dead(
            path,
            "canonical order",
            "a prefix of the expert is already equivalent to the reference, and the "
            "search does not extend a μGraph once it matches",
            None,
        )
        return True

    def _matches(self, path: Path, state: State) -> str | None:
        """The digest of the μGraph `state` is, where it is a candidate that matches the reference."""
        found = self.s.verify(state, path)
        return found.digest if found is not None else None

    def _dead(self, path: Path, rule: str, reason: str, setting: str | None) -> None:
        if self.best is None or len(path) > self.best.depth:
            self.best = _DeadEnd(len(path), path, rule, reason, setting)

    def _oracle(self, path: Path, good: list[tuple[int, State]]) -> None:
        terms = [e for _, k in good for e in k.new]
        verdicts = self.s.oracle.verdicts(terms)
        bad = [(e, v) for e, v in zip(terms, verdicts, strict=True) if not self.s.oracle.keeps(v)]
        label = good[0][1].label
        if not bad:
            return
        term, verdict = bad[0]
        if verdict is Verdict.UNKNOWN:
            why, setting = f"undecided within rlimit {self.cfg.rlimit} (unknowns are pruned)", "unknown_keeps=true"
        elif verdict is Verdict.SHRINKS:
            why, setting = "a subexpression only through a sum of lower degree (degrees only grow)", "grow_only=false"
        else:
            why, setting = "not a subexpression of the reference's output", None
        text = term.sexpr if len(term.sexpr) <= 90 else term.sexpr[:87] + "..."
        self._dead(path, "oracle verdict", f"the oracle prunes step {label}: its term {text} is {why}", setting)

    # -- naming the rule -------------------------------------------------------------------------
    def _name(self, i: int) -> str:
        return self.names[i] if i < len(self.names) else f"t{i}"

    def _diagnose(self, path: Path, state: State) -> None:
        ks = kernel_sigs(state)
        if state.block is None:
            self._kernel_rule(path, state, ks)
            return
        bt = self._block_of(state, ks)
        assert bt is not None
        if not state.block.configured:
            self._loop_rule(path, state, bt)
        else:
            self._block_rule(path, state, ks, bt)

    def _kernel_rule(self, path: Path, state: State, ks: list[Sig]) -> None:
        cfg, have = self.cfg, set(ks)
        ready = [s for s in self.t.steps if not set(s.outs) <= have and set(s.ins) <= have]
        if not ready:
            self._dead(path, "candidate", "no listed choice continues the expert", None)
            return
        step = ready[0]
        if len(state.ops) >= cfg.max_kernel_ops:
            self._dead(
                path,
                "op count",
                f"the expert has {self.t.kernel_ops} kernel ops counting its inputs, "
                f"max_kernel_ops is {cfg.max_kernel_ops}",
                f"max_kernel_ops={self.t.kernel_ops}",
            )
            return
        ins = tuple(ks.index(s) for s in step.ins)
        if step.block is None:
            self._predefined_rule(path, state, step, ins)
        else:
            self._open_rule(path, state, step.block, ks)

    def _predefined_rule(self, path: Path, state: State, step: KernelStep, ins: tuple[int, ...]) -> None:
        cfg = self.cfg
        what = f"{step.kind}({','.join(self._name(i) for i in ins)})"
        if step.kind not in cfg.kernel_ops:
            self._dead(
                path,
                "kernel ops",
                f"the expert's kernel op {what} is not among the kernel ops [{', '.join(map(str, cfg.kernel_ops))}]",
                _setting_list("kernel_ops", cfg.kernel_ops, step.kind),
            )
            return
        key = tuple(sorted(ins)) if step.kind in COMMUTATIVE_OPS else ins
        if (key, TYPE_ORDER[step.kind]) <= state.last:
            self._order(path, state, what)
            return
        self._dead(
            path,
            "memory",
            f"the expert's kernel op {what} does not fit in device memory beside the tensors before it",
            None,
        )

    def _order(self, path: Path, state: State, what: str) -> None:
        self._dead(
            path,
            "canonical order",
            f"the expert's {what} would come after {state.label}, which ranks "
            "above it in Mirage's canonical order (operands, then op kind); no setting changes the order",
            None,
        )

    def _open_rule(self, path: Path, state: State, bt: BlockTarget, ks: list[Sig]) -> None:
        cfg = self.cfg
        if state.n_block_graphs >= cfg.max_block_graphs:
            n = self.t.block_graphs
            self._dead(
                path,
                "block graphs",
                f"the expert has {n} graph-defined ops, max_block_graphs is {cfg.max_block_graphs}",
                f"max_block_graphs={n}",
            )
            return
        wanted = sorted(src for src, _, _ in bt.inputs)
        tuples = C.block_source_options(len(state.tensors), cfg)
        sources = next((o for o in tuples if sorted(ks[i] for i in o) == wanted), None)
        reads = [self._name(ks.index(s)) for s in sorted(set(wanted), key=ks.index)]
        if sources is None:
            mirage = C.block_sources(len(state.tensors), cfg)
            given = "none" if mirage is None else ", ".join(self._name(i) for i in mirage)
            four = len(wanted) == 4 and len(state.tensors) == 4 and not cfg.four_input_blocks
            part = mirage is not None and set(wanted) < {ks[i] for i in mirage} and cfg.block_inputs == "mirage"
            subsets = " or a non-empty part of them" if cfg.block_inputs == "subsets" else ""
            times = Counter(wanted)
            again = [self._name(ks.index(s)) for s in sorted(times, key=ks.index) if times[s] > 1]
            what = (
                f"reads {', '.join(again)} more than once, but a new block graph here reads each tensor once: "
                if again
                else f"reads {', '.join(reads)}, but a new block graph here reads "
            )
            self._dead(
                path,
                "block inputs",
                f"the expert's block graph {what}{given}{subsets} (Mirage's block-input rule: all three "
                "tensors when there are three, all four with four_input_blocks, else the last two)",
                "four_input_blocks=true" if four else "block_inputs=subsets" if part else None,
            )
            return
        if (sources, TYPE_ORDER[OpKind.CUSTOMIZED]) <= state.last:
            self._order(path, state, f"block graph over {', '.join(reads)}")
            return
        shapes = [state.tensors[i].shape for i in sources]
        grids = C.grid_candidates(shapes, cfg)
        if bt.grid not in grids:
            shown = ", ".join(str(list(g)) for g in grids[:8]) + (", ..." if len(grids) > 8 else "")
            self._dead(
                path,
                "grid",
                f"the expert's grid {list(bt.grid)} is not a candidate (candidates: {shown})",
                self._grid_setting(bt.grid, shapes),
            )
            return
        by_src = {src: m for src, m, _ in bt.inputs}
        imaps = tuple(by_src[ks[i]] for i in sources)
        options = C.imap_combos(shapes, bt.grid, cfg)
        if imaps not in options:
            allowed = {normalise_imap(m, bt.grid) for m in cfg.imaps}
            missing = next((m for m in imaps if m not in allowed), imaps[0])
            self._dead(
                path,
                "imaps",
                f"the expert's imaps {[list(m) for m in imaps]} under grid {list(bt.grid)} are "
                f"not a candidate combination (imap {list(missing)} is not among the imaps)",
                _setting_list("imaps", cfg.imaps, missing),
            )
            return
        self._dead(path, "grid", f"no listed choice opens the expert's block graph (grid {list(bt.grid)})", None)

    def _grid_setting(self, grid: Dim3, shapes: Sequence[tuple[int, ...]]) -> str:
        """The one setting, of the few that bound the grids, that makes `grid` a candidate here, tried
        on the candidates themselves; else the candidates here with `grid` added as `grids`."""
        cfg = self.cfg
        tries: list[tuple[dict[str, Any], str]] = []
        if cfg.grids is None:
            blocks = grid[0] * grid[1] * grid[2]
            if blocks < cfg.min_blocks:
                tries.append(({"min_blocks": blocks}, f"min_blocks={blocks}"))
            if blocks > cfg.max_blocks:
                tries.append(({"max_blocks": blocks}, f"max_blocks={blocks}"))
            if grid[1:] == (1, 1):
                for d in sorted({d for s in shapes for d in s}):
                    if d % grid[0] == 0 and d // grid[0] not in cfg.grid_divisors:
                        more = d // grid[0]
                        text = _setting_list("grid_divisors", cfg.grid_divisors, more)
                        tries.append(({"grid_divisors": [*cfg.grid_divisors, more]}, text))
                        break
        for overrides, text in tries:
            try:
                admits = grid in C.grid_candidates(shapes, cfg.with_overrides(overrides))
            except ConfigError:
                continue
            if admits:
                return text
        return _setting_list("grids", C.grid_candidates(shapes, cfg), grid)

    def _loop_rule(self, path: Path, state: State, bt: BlockTarget) -> None:
        cfg, b = self.cfg, state.block
        assert b is not None
        ks = kernel_sigs(state)
        fmap_of = {src: f for src, _, f in bt.inputs}
        fmaps = [fmap_of[ks[i]] for i in b.sources]
        split = any(f >= 0 for f in fmaps)
        if split and bt.forloop not in cfg.franges:
            self._dead(
                path,
                "for-loop range",
                f"the expert's for-loop range {bt.forloop} is not among the ranges {list(cfg.franges)}",
                _setting_list("franges", cfg.franges, bt.forloop),
            )
            return
        bad = [f for f in fmaps if f >= 0 and f not in cfg.fmaps]
        if bad:
            self._dead(
                path,
                "fmaps",
                f"the expert's fmap {bad[0]} is not among the fmaps {list(cfg.fmaps)}",
                _setting_list("fmaps", cfg.fmaps, bad[0]),
            )
            return
        if not split and bt.forloop != 1:
            self._dead(
                path,
                "for-loop range",
                f"the expert loops {bt.forloop} times over inputs the loop does not "
                "split; the search uses range 1 there",
                None,
            )
            return
        self._dead(
            path,
            "memory",
            f"the expert's block inputs (fmaps {fmaps}, for-loop range {bt.forloop}) do not "
            "fit in shared memory, or the range does not divide a split dim",
            None,
        )

    def _block_rule(self, path: Path, state: State, ks: list[Sig], bt: BlockTarget) -> None:
        cfg, b = self.cfg, state.block
        assert b is not None
        bs = block_sigs(b, ks)
        have = set(bs)
        ready = [op for op in bt.ops if op[2] not in have and set(op[1]) <= have and op[0] is not OpKind.CONCAT]
        ready += [
            op for op in bt.ops if op[2] not in have and op[0] is OpKind.MATMUL and any(a not in have for a in op[1])
        ]  # a matmul of concatenations: the lora macro
        if not ready:
            self._close_rule(path, state, bt, bs)
            return
        kind, args, _ = ready[0]
        what = f"block {kind}"
        if b.op_count >= cfg.max_block_ops:
            self._dead(
                path,
                "op count",
                f"the expert's block graph has {bt.op_count} block ops counting its "
                f"inputs, max_block_ops is {cfg.max_block_ops}",
                f"max_block_ops={bt.op_count}",
            )
            return
        if any(a not in have for a in args):
            if not cfg.concat_matmul:
                self._dead(
                    path,
                    "block ops",
                    "the expert concatenates block tensors, which the search does only as "
                    "the lora preset's concat-then-matmul",
                    "concat_matmul=true",
                )
            else:
                self._dead(
                    path, "block ops", "the expert's concatenations are not a concat-then-matmul the search lists", None
                )
            return
        if kind not in cfg.block_ops:
            self._dead(
                path,
                "block ops",
                f"the expert's {what} is not among the block ops [{', '.join(map(str, cfg.block_ops))}]",
                _setting_list("block_ops", cfg.block_ops, kind),
            )
            return
        ins = tuple(bs.index(a) for a in args)
        key = tuple(sorted(ins)) if kind in COMMUTATIVE_OPS else ins
        if (key, TYPE_ORDER[kind]) <= b.last:
            self._order(path, state, f"{kind}({','.join(map(str, ins))})")
            return
        self._dead(path, "memory", f"the expert's {what} does not fit in shared memory", None)

    def _close_rule(self, path: Path, state: State, bt: BlockTarget, bs: list[Sig]) -> None:
        cfg, b = self.cfg, state.block
        assert b is not None
        n = len(bt.outputs)
        if n > cfg.max_block_outputs:
            self._dead(
                path,
                "block outputs",
                f"the expert's block graph has {n} outputs, max_block_outputs is {cfg.max_block_outputs}",
                f"max_block_outputs={n}",
            )
            return
        omaps = {m for _, m in bt.outputs}
        if len(omaps) > 1:
            self._dead(
                path,
                "omaps",
                "the expert's block outputs use different omaps; the search closes a block "
                "graph with one omap for all of its outputs",
                None,
            )
            return
        omap = omaps.pop()
        rank = min(len(b.tensors[bs.index(s)].shape) for s, _ in bt.outputs)
        if omap not in C.omap_candidates(b.grid, rank, cfg):
            self._dead(
                path,
                "omaps",
                f"the expert's omap {list(omap)} is not a candidate for grid {list(b.grid)}",
                _setting_list("omaps", cfg.omaps, omap),
            )
            return
        dangling = {bs[i] for i in range(len(b.inputs), len(b.tensors)) if b.uses[i] == 0}
        outputs = {s for s, _ in bt.outputs}
        if dangling != outputs:
            what = "outputs a tensor that it also reads" if outputs - dangling else "leaves a computed tensor unread"
            self._dead(
                path,
                "block outputs",
                f"the search makes exactly the block tensors nothing reads its outputs; the expert's block "
                f"graph {what}",
                None,
            )
            return
        self._dead(path, "memory", "the expert's block outputs do not fit in device memory", None)


def explain_expert(searcher: Searcher, label: str, expert: KernelGraph) -> Explanation:
    """Whether the search of `searcher`'s fragment reaches `expert`, and if not, why."""
    walk = _Walk(searcher, target_of(expert), canonical_digest(expert))
    path = walk.run()
    if path is not None:
        labels = structure_labels(describe_instances(searcher.fragment.root, walk.cfg, path))
        return Explanation(label, True, path=searcher.find_path(labels), labels=labels)
    dead = walk.best
    if dead is None:
        return Explanation(label, False, "walk limit", f"more than {WALK_LIMIT:,} orders of the expert tried")
    labels = describe_instances(searcher.fragment.root, walk.cfg, dead.path)
    return Explanation(label, False, dead.rule, dead.reason, dead.setting, dead.path, labels)
