"""The end-of-run report: written by `optimize` beside the store, its numbers equal the store's, and
it opens in headless Chromium with the network cut off, showing every section."""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from mugraph.dashboards.report import (
    SECTIONS,
    FragmentSummary,
    ReportData,
    TimelineSample,
    read_report_data,
    report_path,
)
from mugraph.dashboards.summary import Headline, SizeRecord
from mugraph.stages.layout.rows import RankedRow
from mugraph.storage.run.run_records import FinalRecord, FragmentProgress
from mugraph.storage.run.store import RunStore
from tests.helpers.browser import BROWSERS, which_executable
from tests.helpers.cli_runs import done, mugraph, optimize_args


def chromium() -> str:
    exe = which_executable(BROWSERS, "MUGRAPH_CHROMIUM")
    assert exe, "headless Chromium is needed (scripts/test.sh installs Debian's chromium package)"
    return exe


def dump_dom_offline(page: Path) -> str:
    """The DOM after Chromium loaded `page` with every network request sent to a dead proxy."""
    out = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--proxy-server=socks5://127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            "--virtual-time-budget=3000",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    cwd = tmp_path_factory.mktemp("report")
    last = done(
        mugraph(
            *optimize_args("rms_norm", cwd / "run.zarr", "--workers", "2", "--memo-url", "local", budget=40), cwd=cwd
        )
    )
    return cwd / "run.zarr", last


def test_optimize_writes_a_report_whose_numbers_are_the_stores(finished: tuple[Path, dict[str, Any]]) -> None:
    store, last = finished
    page = report_path(store)
    assert last["report"] == str(page) and page.exists()
    data = read_report_data(page.read_text())
    with RunStore.open_existing(store) as st:
        tasks = st.tasks()
        summary = st.task_summary()
        assert data["tasks"] == {"total": summary["tasks"], "done": summary["done"], "pending": summary["pending"]}
        assert data["identity"] == st.identity and data["final"] is not None and data["final"]["best"] == last["best"]
        busy: dict[str, float] = defaultdict(float)
        for t in tasks:
            busy[t.worker] += t.counters["seconds"]
        assert {w: v["busy_seconds"] for w, v in data["workers"].items()} == {w: round(s, 3) for w, s in busy.items()}
        assert sum(v["tasks"] for v in data["workers"].values()) == len(tasks) == last["tasks_done"]
        assert [r["digest"] for r in data["ranking"]["f0"]] == [r["digest"] for r in st.ranking(0) or []]
        assert data["fragments"][0]["confirmed"] == len(last["mugraphs"]) == data["fragments"][0]["layouts"]
        assert data["counters"]["nodes"] == sum(t.counters["nodes"] for t in tasks)
        # the timeline ends where the run ended
        final_sample = data["timeline"][-1]
        assert final_sample["tasks_done"] == len(tasks) and final_sample["states"] == data["counters"]["nodes"]
        assert final_sample["confirmed"] == len(last["mugraphs"])
        assert data["chosen"]["f0"]["digest"] == last["best"]

    # the typed records name every key a real run writes (a field added by the driver, the ranking or
    # the report without its record's key fails here)
    def fits(record: Any, keys: Iterable[str]) -> bool:
        return bool(set(record.__required_keys__) <= set(keys) <= record.__required_keys__ | record.__optional_keys__)

    assert data["timeline"] and all(fits(TimelineSample, s) for s in data["timeline"])
    assert all(fits(FragmentProgress, f) for s in data["timeline"] for f in s["fragments"].values())
    assert all(fits(RankedRow, r) for r in data["ranking"]["f0"])
    assert fits(ReportData, data) and all(fits(FragmentSummary, f) for f in data["fragments"])
    assert all(h is None or fits(Headline, h) for h in data["headlines"].values())
    assert data["size"] is None or fits(SizeRecord, data["size"])
    assert data["final"] is not None and fits(FinalRecord, data["final"])
    # written again by `mugraph report`, the same numbers (apart from when it was generated)
    other = store.parent / "again.html"
    proc = mugraph("report", str(store), "--out", str(other), cwd=store.parent)
    assert proc.returncode == 0 and proc.stdout.strip() == str(other)
    again = read_report_data(other.read_text())
    assert {k: v for k, v in again.items() if k != "generated"} == {k: v for k, v in data.items() if k != "generated"}


def test_the_report_is_self_contained_and_renders_offline(finished: tuple[Path, dict[str, Any]]) -> None:
    store, last = finished
    text = report_path(store).read_text()
    assert not re.search(r'(?:src|href)\s*=\s*["\']?(?:https?:)?//', text) and "url(http" not in text
    assert "<script src" not in text and "<link" not in text
    dom = dump_dom_offline(report_path(store))
    for key in SECTIONS:
        assert f'<section id="{key}">' in dom, key
    # plots with data: one line per fragment and series, a bar per worker, the μGraph drawn
    assert dom.count("<polyline") >= 6 and dom.count('data-value="') == len(last["worker_busy_seconds"])
    # the chosen μGraph drawn (the reference, with no block level, when no μGraph is confidently faster)
    fused = last["best"] != last["reference"]["f0"]["digest"]
    assert 'data-level="kernel"' in dom
    assert not fused or ('data-level="block"' in dom and 'data-kind="customized"' in dom)
    assert (last["best"][:16] in dom or not fused) and "no data" not in dom


def test_report_of_a_store_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    proc = mugraph("report", str(tmp_path / "nope.zarr"), cwd=tmp_path)
    assert proc.returncode == 2 and "no such run store" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
