"""The pipeline tests' budget and the same search run serially in this process, which the
distributed run must equal."""

from __future__ import annotations

from mugraph.programs import get_builtin
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.task_paths import Path as SearchPath
from mugraph.stages.search.task_paths import task_budget
from tests.helpers.narrow import NARROW

BUDGET = 40


def serial_tasks(name: str, budget: int) -> tuple[set[str], set[SearchPath]]:
    """The μGraphs and the task paths of the same search run serially in this process."""
    prog = get_builtin(name)
    cfg = preset_config(prog.preset).with_overrides(NARROW[name])
    searcher = Searcher(Fragment(prog.reference(), cfg, name))
    pending: list[SearchPath] = [()]
    paths: set[SearchPath] = set()
    found: set[str] = set()
    while pending:
        p = pending.pop()
        paths.add(p)
        r = searcher.explore(p, task_budget(p, budget))
        found |= set(r.found)
        pending.extend(r.frontier)
    return found, paths
