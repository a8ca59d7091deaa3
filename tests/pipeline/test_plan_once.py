"""A run makes its plan and resolves its I/O layouts once, and hands both down: a resumed run whose
store holds another budget than the default, and that is given none, used to make its plan twice
(once for the default budget, again for the stored one), and the layouts were resolved by the entry
and again by the driver."""

from __future__ import annotations

import contextlib
import importlib
import types
from pathlib import Path
from typing import Any

import pytest

import mugraph.pipeline.driver
import mugraph.pipeline.plan
from mugraph.api import OptimizeOptions, run_optimize
from tests.helpers.narrow import NARROW

BUDGET = 40  # not the default: the resumed run takes it from the store


def _count(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count calls of pipeline.plan's function `name`, wherever a module imported it."""
    calls: list[int] = []
    real = getattr(mugraph.pipeline.plan, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    holders: list[types.ModuleType] = [mugraph.pipeline.plan, mugraph.pipeline.driver]
    with contextlib.suppress(ImportError):  # where the run is put together (not on older trees)
        holders.append(importlib.import_module("mugraph.run.prepare"))
    for module in holders:
        if getattr(module, name, None) is real:
            monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.slow  # a run killed and resumed: about 17 s
def test_a_resumed_run_makes_its_plan_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "run.zarr"
    common = {
        "settings": NARROW["rms_norm"],
        "workers": 1,
        "memo_url": "local",
        "store": store,
        "dashboard_address": None,
    }
    first = run_optimize("rms_norm", OptimizeOptions(budget=BUDGET, layouts={"X": 1}, **common))  # type: ignore[arg-type]
    assert first["complete"]
    plans = _count(monkeypatch, "make_plan")
    layouts = _count(monkeypatch, "fragment_io_layouts")
    again = run_optimize("rms_norm", OptimizeOptions(layouts={"X": 1}, **common))  # type: ignore[arg-type]
    assert again["complete"] and again["mugraphs"] == first["mugraphs"] and again["best"] == first["best"]
    assert (len(plans), len(layouts)) == (1, 1)
