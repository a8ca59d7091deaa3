"""One built-in program's narrowed fragment searched whole in this process (cached: several test
modules compare against it)."""

from __future__ import annotations

from functools import cache

from mugraph.programs import get_builtin
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import ExploreResult, Fragment, Searcher
from tests.helpers.builtin import reference
from tests.helpers.narrow import NARROW

FAST = ["rms_norm", "lora", "gated_mlp"]


def fragment(name: str, **extra: object) -> Fragment:
    prog = get_builtin(name)
    cfg = preset_config(prog.preset).with_overrides({**NARROW[name], **extra})
    return Fragment(reference(name), cfg, name)


@cache
def searcher(name: str) -> Searcher:
    return Searcher(fragment(name))


@cache
def full(name: str) -> ExploreResult:
    return searcher(name).explore(())
