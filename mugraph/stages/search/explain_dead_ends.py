"""Where the walk in `explain` finds no listed choice that continues the expert, and why.

Of those states, the deepest is the first choice that excludes the expert; its rule (recorded by
`explain_kernel_rules` or `explain_block_rules`, or by the walk for the oracle's verdict) is the one
named, with the `--set` that would admit the expert where one would.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.expert_target import BlockTarget, Sig, Target, block_sigs, normalise_imap
from mugraph.stages.search.state import State
from mugraph.stages.search.task_paths import Path


@dataclass
class DeadEnd:
    depth: int
    path: Path
    rule: str
    reason: str
    setting: str | None


def setting_list(name: str, values: Sequence[Any], extra: Any) -> str:
    """`name=[...]` with `extra` appended, as JSON (maps as lists)."""

    def plain(v: Any) -> Any:
        return [plain(x) for x in v] if isinstance(v, tuple | list) else getattr(v, "value", v)

    items = [plain(v) for v in values] + [plain(extra)]
    return f"{name}={items}".replace("'", '"').replace(" ", "")


def op_not_listed(
    name: str, what: str, kind: Any, listed: Sequence[Any], searchable: Collection[Any]
) -> tuple[str, str | None]:
    """The reason an expert's op is not among `name` (kernel_ops or block_ops), and the setting
    that adds it, or none where the search cannot enumerate that kind at all (its scalar or dim is
    not the search's to choose): a setting the config would refuse is no advice."""
    level = "kernel" if name == "kernel_ops" else "block"
    reason = f"the expert's {what} is not among the {level} ops [{', '.join(map(str, listed))}]"
    if kind not in searchable:
        return f"{reason}, and the search cannot enumerate {kind} ops in a {level} graph", None
    return reason, setting_list(name, listed, kind)


def block_of(target: Target, state: State, ks: Sequence[Sig]) -> BlockTarget | None:
    """The expert's block graph an open block of `state` is building, if any."""
    b = state.block
    assert b is not None
    for step in target.steps:
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


class DeadEnds:
    """The deepest state found where no listed choice continues the expert, and why: the rules of
    `explain_kernel_rules` and `explain_block_rules` record what they find here."""

    def __init__(self, cfg: SearchConfig, target: Target, names: Sequence[str]) -> None:
        self.cfg = cfg
        self.t = target
        self.names = names
        self.best: DeadEnd | None = None

    def dead(self, path: Path, rule: str, reason: str, setting: str | None) -> None:
        if self.best is None or len(path) > self.best.depth:
            self.best = DeadEnd(len(path), path, rule, reason, setting)

    def name(self, i: int) -> str:
        return self.names[i] if i < len(self.names) else f"t{i}"

    def order(self, path: Path, state: State, what: str) -> None:
        self.dead(
            path,
            "canonical order",
            f"the expert's {what} would come after {state.label}, which ranks "
            "above it in Mirage's canonical order (operands, then op kind); no setting changes the order",
            None,
        )
