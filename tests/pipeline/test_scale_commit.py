"""A batch of finished search tasks is committed to the run store in a handful of file writes, in the
order that keeps `kill -9` safe: found μGraphs, children rows, the commit record, counters, and the
done statuses last; a crash before the statuses leaves every task of the batch pending and rerunnable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mugraph.storage.run import records, task_table
from mugraph.storage.run.atomic_store import write_atomic
from mugraph.storage.run.store import FoundRecord, RunStore, TaskCompletion
from tests.helpers.graphs import digest_of as D
from tests.helpers.graphs import graph_of as G

IDENTITY = {"program": "lora", "program_digest": "p1", "config_digest": "c1", "budget": "1000"}
BATCH = 40  # finished tasks in one commit


def store(path: Path) -> RunStore:
    return RunStore.open(path, IDENTITY, counter_names=("states",))


def batch(rows: list[int]) -> list[TaskCompletion]:
    """Each task found one μGraph (two tasks share each digest) and has two children."""
    return [
        TaskCompletion(
            r,
            {"states": float(r)},
            f"w{r % 3}",
            [FoundRecord(0, D(f"d{r // 2}"), (r,), G(f"d{r // 2}"), r)],
            [(r, 0), (r, 1)],
        )
        for r in rows
    ]


def test_a_batch_is_a_few_writes_in_the_safe_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    st = store(path)
    rows = st.add_tasks([(0, (i,), -1) for i in range(BATCH)])
    written: list[str] = []

    def recording(file: Path, data: bytes, **kw: Any) -> None:
        written.append(file.relative_to(path).as_posix())
        write_atomic(file, data, **kw)

    monkeypatch.setattr(task_table, "write_atomic", recording)
    monkeypatch.setattr(records, "write_atomic", recording)
    kids = st.complete_tasks(batch(rows))
    st.close()
    tasks = [w for w in written if w.startswith("tasks/")]
    found = [w for w in written if w.startswith("found/0/") and w != "found/0/zarr.json"]
    assert len(found) == BATCH // 2  # one record per digest, the smaller path kept
    assert written.index(tasks[0]) > written.index(found[-1])  # the μGraphs before any task row
    assert tasks == [
        "tasks/path/c/0/0",
        "tasks/info/c/0/0",
        "tasks/rank/c/0/0",
        "tasks/zarr.json",
        "tasks/counters/c/0/0",
        "tasks/info/c/0/0",
    ]  # 6 task writes for 40 tasks, the statuses last
    with RunStore.open_existing(path) as st:
        done = {t.row: t for t in st.tasks() if t.done}
        assert sorted(done) == rows
        assert all(done[r].counters == {"states": float(r)} and done[r].worker == f"w{r % 3}" for r in rows)
        assert [k for ks in kids for k in ks] == list(range(BATCH, 3 * BATCH))
        assert {t.path for t in st.pending()} == {(r, c) for r in range(BATCH) for c in (0, 1)}
        assert {d: f.path for d, f in st.found(0).items()} == {D(f"d{i}"): (2 * i,) for i in range(BATCH // 2)}


class Crash(Exception):
    """Stands in for the driver dying just before the statuses are written."""


def test_a_crash_before_the_statuses_leaves_the_whole_batch_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    with store(path) as st:
        rows = st.add_tasks([(0, (i,), -1) for i in range(BATCH)])
        with monkeypatch.context() as m:
            m.setattr(task_table.TaskTable, "mark_done", lambda *a: (_ for _ in ()).throw(Crash()))
            with pytest.raises(Crash):
                st.complete_tasks(batch(rows))
    with store(path) as st:
        assert {t.row for t in st.pending()} >= set(rows)  # rerun on resume
        again = st.complete_tasks(batch(rows))  # the rerun finds its committed children again
        assert [k for ks in again for k in ks] == list(range(BATCH, 3 * BATCH))
        assert all(t.done for t in st.tasks() if t.row in rows)
