"""Why an expert μGraph is, or is not, in the configured search space.

The search tree is walked depth first through the states that are prefixes of the expert
(`expert_target`): at each one its children are listed exactly as the search lists them, those
that build part of the expert are kept, and the oracle judges only those. Reaching the complete
expert gives its path ("at root choice N"). Otherwise the deepest state where no listed
child continues the expert is the first choice that excludes it (`explain_dead_ends`), and the rule
that left the expert's next step out is named with the setting that would admit it
(`explain_kernel_rules`, `explain_block_rules`; the oracle's verdict here).
"""

from __future__ import annotations

from dataclasses import replace

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.graph import KernelGraph
from mugraph.stages.prune.oracle import Verdict
from mugraph.stages.search.config import ConfigError, SearchConfig, parse_override
from mugraph.stages.search.expand import child_list, describe_instances
from mugraph.stages.search.expert_target import Target, kernel_sigs, target_of
from mugraph.stages.search.explain_block_rules import block_rule, loop_rule
from mugraph.stages.search.explain_dead_ends import DeadEnds, block_of
from mugraph.stages.search.explain_kernel_rules import kernel_rule
from mugraph.stages.search.explanation import Explanation
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.state import State
from mugraph.stages.search.structure_labels import structure_labels
from mugraph.stages.search.task_paths import Path

WALK_LIMIT = 20_000  # states visited before the walk gives up (many orders of one expert)


class _Walk:
    def __init__(self, searcher: Searcher, target: Target, digest: str) -> None:
        self.s = searcher
        self.cfg: SearchConfig = searcher.fragment.config
        self.t = target
        self.digest = digest
        self.ends = DeadEnds(self.cfg, target, searcher.fragment.input_names)

    def continues(self, state: State) -> bool:
        ks = kernel_sigs(state)
        if not set(ks) <= self.t.sigs:
            return False
        return state.block is None or block_of(self.t, state, ks) is not None

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
                self.ends.dead(
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
        self.ends.dead(
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
        self.ends.dead(path, "oracle verdict", f"the oracle prunes step {label}: its term {text} is {why}", setting)

    def _diagnose(self, path: Path, state: State) -> None:
        ks = kernel_sigs(state)
        if state.block is None:
            kernel_rule(self.ends, path, state, ks)
            return
        bt = block_of(self.t, state, ks)
        assert bt is not None
        if not state.block.configured:
            loop_rule(self.ends, path, state, bt)
        else:
            block_rule(self.ends, path, state, ks, bt)


def explain_expert(searcher: Searcher, label: str, expert: KernelGraph) -> Explanation:
    """Whether the search of `searcher`'s fragment reaches `expert`, and if not, why. A setting is
    offered only where the search under it gets further: where it then stops the walk at a rule no
    setting changes (the oracle, the canonical order), the setting is said to be no help and why."""
    e = _explained(searcher, label, expert)
    if e.setting is None:
        return e
    fragment = searcher.fragment
    try:
        cfg = fragment.config.with_overrides(dict([parse_override(e.setting)]))
    except ConfigError:  # a setting the config refuses is no advice
        return replace(e, setting=None)
    under = Searcher(Fragment(fragment.reference, cfg, fragment.name), searcher.oracle.memo)
    then = _explained(under, label, expert)
    if then.inside or then.setting is not None:  # admitted, or past this rule to one a setting admits
        return e
    return replace(e, setting=None, reason=f"{e.reason}; --set {e.setting} gets past this, but then {then.reason}")


def _explained(searcher: Searcher, label: str, expert: KernelGraph) -> Explanation:
    rdx = searcher.fragment.config.rdx
    theirs = sorted({op.block.rdx for op in expert.ops if op.block is not None})
    if theirs and theirs != [rdx]:  # every block graph the search makes has the config's rdx
        if len(theirs) > 1:
            said, setting = f"block graphs have reduction_dimx {', '.join(map(str, theirs))}", None
        else:
            said, setting = f"block graph has reduction_dimx {theirs[0]}", f"rdx={theirs[0]}"
        return Explanation(
            label, False, "rdx", f"the expert's {said}; every block graph the search makes has rdx {rdx}", setting
        )
    walk = _Walk(searcher, target_of(expert), canonical_digest(expert))
    path = walk.run()
    if path is not None:
        labels = structure_labels(describe_instances(searcher.fragment.root, walk.cfg, path))
        return Explanation(label, True, path=searcher.find_path(labels), labels=labels)
    dead = walk.ends.best
    if dead is None:
        return Explanation(label, False, "walk limit", f"more than {WALK_LIMIT:,} orders of the expert tried")
    labels = describe_instances(searcher.fragment.root, walk.cfg, dead.path)
    return Explanation(label, False, dead.rule, dead.reason, dead.setting, dead.path, labels)
