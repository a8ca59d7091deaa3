"""The Zarr run store on a real disk: reopening, identity, the lock, write order, kill -9, damage."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.core.sync import sync as zarr_sync

from mugraph.ir.errors import MugraphError
from mugraph.storage.run import records, task_table
from mugraph.storage.run.atomic_store import write_atomic
from mugraph.storage.run.chunk_codec import compressors, encode_chunk
from mugraph.storage.run.ledger import LEDGER_NAME
from mugraph.storage.run.store import (
    SCHEMA_VERSION,
    FoundRecord,
    RunStore,
    StoreBusy,
    StoreDamaged,
    StoreError,
    StoreMismatch,
    TaskCompletion,
    TaskSummary,
)
from tests.helpers.graphs import digest_of as D
from tests.helpers.graphs import graph_of as G
from tests.helpers.run_store import (
    COUNTERS,
    FRAGMENTS,
    IDENTITY,
    children_of,
    confirmation,
    found_of,
    layout,
    new_store,
    run_to_end,
)

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ a deterministic search tree


def expected_tree() -> tuple[set[tuple[int, tuple[int, ...]]], dict[int, dict[str, tuple[int, ...]]]]:
    """Every (fragment, path) of the tree, and per fragment each digest's smallest path."""
    nodes: set[tuple[int, tuple[int, ...]]] = set()
    best: dict[int, dict[str, tuple[int, ...]]] = {f: {} for f in range(len(FRAGMENTS))}
    for f in range(len(FRAGMENTS)):
        stack: list[tuple[int, ...]] = [()]
        while stack:
            p = stack.pop()
            nodes.add((f, p))
            for rec in found_of(f, p, 0):
                if rec.digest not in best[f] or p < best[f][rec.digest]:
                    best[f][rec.digest] = p
            stack.extend(children_of(p))
    return nodes, best


def check_invariants(store: RunStore) -> None:
    """What must hold after any crash: done tasks have their children and found μGraphs."""
    tasks = store.tasks()
    by_key = {(t.fragment, t.path): t for t in tasks}
    assert len(by_key) == len(tasks), "a (fragment, path) appears twice"
    for t in tasks:
        if t.parent == -1:
            assert t.path == ()
        else:
            parent = tasks[t.parent]
            assert parent.fragment == t.fragment and parent.path == t.path[:-1]
        if not t.done:
            continue
        assert t.counters == {"states": 1.0, "depth": float(len(t.path))}
        assert t.worker
        for child in children_of(t.path):
            assert by_key[(t.fragment, child)].parent == t.row
        found = store.found(t.fragment)
        for rec in found_of(t.fragment, t.path, t.row):
            assert found[rec.digest].path <= t.path
    summary = store.task_summary()
    assert summary["done"] + summary["pending"] == summary["tasks"] == len(tasks)


def openers(path: Path) -> list[Callable[[], RunStore]]:
    """The writer's open and the reader's."""
    return [lambda: new_store(path), lambda: RunStore.open_existing(path)]


# ------------------------------------------------------------------ opening, identity, fresh, lock


def test_create_and_reopen_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "run.zarr"
    with new_store(path) as st:
        assert st.created and st.identity == IDENTITY and st.meta == {"argv": ["mugraph", "optimize"]}
        assert st.fragments() == [] and st.tasks() == [] and st.final() is None
        st.set_fragments(FRAGMENTS)
        st.set_fragments(FRAGMENTS)  # the same again: a no-op
        assert st.add_tasks([(0, (), -1), (1, (), -1)]) == [0, 1]
        kids = st.complete_task(
            0,
            counters={"states": 7},
            worker="tcp://w1",
            found=[FoundRecord(0, D("abc"), (0, 1), G("abc"), 0)],
            children=[(0,), (1,)],
        )
        assert kids == [2, 3]
        st.put_confirmation(0, D("abc"), confirmation(D("abc")))
        st.put_layout(0, D("abc"), layout(D("abc")))
        st.put_ranking(0, [{"digest": D("abc"), "speedup": 1.5}])
        st.put_timeline(0, [{"wall": 1.0, "states": 3}])
        st.put_timeline(0, [{"wall": 1.0, "states": 3}, {"wall": 2.0, "states": 7}])
        st.put_timeline(1, [{"wall": 9.0, "states": 8}])
        with pytest.raises(ValueError, match="invocation"):
            st.put_timeline(-1, [])
        st.put_final({"complete": False, "best": {"f0": D("abc")}})
        assert st.size_bytes() > 0
    with new_store(path) as st:
        assert not st.created and st.meta == {"argv": ["mugraph", "optimize"]}
        assert st.fragments() == FRAGMENTS
        t0, t1, t2, _ = st.tasks()
        assert t0 == task_table.TaskRecord(0, 0, (), -1, True, {"states": 7.0, "depth": 0.0}, "tcp://w1")
        assert not t1.done and t1.counters == {} and t1.worker == ""
        assert (t2.fragment, t2.path, t2.parent) == (0, (0,), 0)
        assert [t.row for t in st.pending()] == [1, 2, 3]
        assert st.found(0) == {D("abc"): FoundRecord(0, D("abc"), (0, 1), G("abc"), 0)} and st.found(1) == {}
        assert st.confirmations(0) == {D("abc"): confirmation(D("abc"))}
        assert st.layouts(0) == {D("abc"): layout(D("abc"))}
        assert st.layouts(1) == {} and st.confirmations(1) == {}
        assert [[dict(s) for s in inv] for inv in st.timeline()] == [
            [{"wall": 1.0, "states": 3}, {"wall": 2.0, "states": 7}],
            [{"wall": 9.0, "states": 8}],
        ]
        assert st.ranking(0) == [{"digest": D("abc"), "speedup": 1.5}] and st.ranking(1) is None
        assert st.final() == {"complete": False, "best": {"f0": D("abc")}}
        summary = st.task_summary()
        assert summary["done"] == 1 and summary["pending"] == 3
        assert summary["fragments"] == {0: {"done": 1, "pending": 2}, 1: {"done": 0, "pending": 1}}
        assert summary["counters"] == {"states": 7.0, "depth": 0.0} and summary["workers"] == {"tcp://w1": 1}
        assert set(summary) == TaskSummary.__required_keys__  # the record names every key, and only those
        with pytest.raises(StoreMismatch, match="other fragments"):
            st.set_fragments(FRAGMENTS[:1])


def test_identity_mismatch_names_the_fields(tmp_path: Path) -> None:
    new_store(tmp_path / "s").close()
    other = {**IDENTITY, "budget": "2000", "program_digest": "p2"}
    with pytest.raises(StoreMismatch) as err:
        RunStore.open(tmp_path / "s", other)
    msg = str(err.value)
    assert "budget: stored '1000', given '2000'" in msg and "program_digest: stored 'p1', given 'p2'" in msg
    assert "config_digest" not in msg and "--fresh" in msg and "--store" in msg
    with pytest.raises(StoreMismatch, match="counter_names"):
        RunStore.open(tmp_path / "s", IDENTITY, counter_names=["other"])
    assert isinstance(err.value, StoreError) and isinstance(err.value, MugraphError)
    new_store(tmp_path / "s").close()  # the refusals left it usable


def test_schema_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "s"
    new_store(path).close()
    root = json.loads((path / "zarr.json").read_text())
    root["attributes"]["schema"] = SCHEMA_VERSION + 1
    (path / "zarr.json").write_text(json.dumps(root))
    for opener in openers(path):
        with pytest.raises(StoreMismatch, match=f"schema version {SCHEMA_VERSION + 1}.*--fresh"):
            opener()


def test_fresh_replaces_a_store(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with new_store(path) as st:
        run_to_end(st, limit=5)
    (path / "tasks" / "info" / "zarr.json").write_text("{damaged")  # fresh also recovers damaged stores
    other = {"program": IDENTITY["program"]}  # the same program's run, other settings (another's is refused)
    with RunStore.open(path, other, fresh=True) as st:
        assert st.created and st.tasks() == [] and st.identity == other
    assert [p.name for p in tmp_path.iterdir()] == ["s"]  # no leftovers beside it


def test_fresh_refuses_a_directory_that_is_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / "mine"
    path.mkdir()
    (path / "notes.txt").write_text("keep me")
    with pytest.raises(StoreError, match="refusing to delete"):
        new_store(path, fresh=True)
    with pytest.raises(StoreError, match="not a mugraph run store"):
        new_store(path)
    assert (path / "notes.txt").read_text() == "keep me"
    zarr.create_group(store=str(tmp_path / "foreign"), attributes={"x": 1})
    with pytest.raises(StoreError, match="not a mugraph run store") as err:
        RunStore.open_existing(tmp_path / "foreign")
    assert not isinstance(err.value, StoreDamaged)
    with pytest.raises(StoreError, match="no run store"):
        RunStore.open_existing(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="is a file"):
        new_store(tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    with new_store(empty) as st:  # an empty directory is fine
        assert st.created


def test_busy_in_the_same_process(tmp_path: Path) -> None:
    with new_store(tmp_path / "s") as st:
        with pytest.raises(StoreBusy, match=r"in use by another run in this process \(another thread") as busy:
            new_store(tmp_path / "s")
        assert busy.value.holder == str(os.getpid())
        with pytest.raises(StoreBusy):
            RunStore.open_existing(tmp_path / "s", readonly=False)
        with pytest.raises(StoreBusy):
            new_store(tmp_path / "s", fresh=True)
        with RunStore.open_existing(tmp_path / "s") as reader:  # readers take no lock
            assert reader.tasks() == []
            with pytest.raises(StoreError, match="read-only"):
                reader.add_tasks([(0, (), -1)])
        st.add_tasks([(0, (), -1)])
    with new_store(tmp_path / "s") as st:  # released on close
        assert len(st.tasks()) == 1
        st.close()
        with pytest.raises(StoreError, match="closed"):
            st.add_tasks([(0, (1,), 0)])


def test_busy_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "s"
    code = (
        "import sys; from pathlib import Path; from mugraph.storage.run.store import RunStore;"
        f"st = RunStore.open(Path(sys.argv[1]), {IDENTITY!r}, counter_names={COUNTERS!r});"
        "print('locked', flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        with pytest.raises(StoreBusy, match=f"pid {child.pid}"):
            new_store(path)
    finally:
        child.kill()
        child.wait()
    new_store(path).close()  # a dead holder's lock is gone


# ------------------------------------------------------------------ tasks, found, order


def test_add_tasks_and_children_are_deduplicated(tmp_path: Path) -> None:
    with new_store(tmp_path / "s") as st:
        st.set_fragments(FRAGMENTS)
        assert st.add_tasks([(0, (), -1), (0, (), -1), (1, (), -1)]) == [0, 0, 1]
        assert st.add_tasks([(0, (), -1), (0, (5,), 0), (0, (5, 1), 2)]) == [0, 2, 3]
        kids = st.complete_task(0, counters={}, worker="w", found=[], children=[(5,), (6,), (6,), (7,)])
        assert kids == [2, 4, 4, 5]
        assert [(t.path, t.parent) for t in st.tasks()[2:]] == [((5,), 0), ((5, 1), 2), ((6,), 0), ((7,), 0)]
        with pytest.raises(ValueError, match="parent row 9"):
            st.add_tasks([(0, (8,), 9)])
        with pytest.raises(ValueError, match="belongs to fragment 0"):
            st.add_tasks([(1, (8,), 0)])
        with pytest.raises(ValueError, match="fragment 3 does not exist"):
            st.add_tasks([(3, (), -1)])
        with pytest.raises(ValueError, match="longer than 64"):
            st.add_tasks([(0, tuple([0] * 65), 0)])
        with pytest.raises(ValueError, match="unknown counters"):
            st.complete_task(1, counters={"nope": 1}, worker="w", found=[], children=[])
        assert len(st.tasks()) == 6  # the refusals added nothing
        assert st.complete_task(0, counters={"states": 99}, worker="w2", found=[], children=[(8,)]) == [6]
        assert st.tasks()[0].counters["states"] == 0.0  # completing again keeps the first counters


def test_found_keeps_the_smaller_path(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with new_store(path) as st:
        st.add_tasks([(0, (), -1), (0, (1,), 0), (0, (0,), 0), (0, (2,), 0)])

        def rec(p: tuple[int, ...], row: int, key: str = "dd") -> FoundRecord:
            return FoundRecord(0, D(key), p, G(key), row)

        st.complete_task(1, counters={}, worker="w", found=[rec((1, 5), 1)], children=[])
        st.complete_task(2, counters={}, worker="w", found=[rec((0, 9), 2), rec((0, 3), 2, "ee")], children=[])
        st.complete_task(3, counters={}, worker="w", found=[rec((2, 0), 3), rec((0, 1), 3, "ee")], children=[])
        expected = {D("dd"): rec((0, 9), 2), D("ee"): rec((0, 1), 3, "ee")}
        assert st.found(0) == expected
        with pytest.raises(ValueError, match="fragment 1"):
            st.complete_task(0, counters={}, worker="w", found=[FoundRecord(1, "x", (), "{}", 0)], children=[])
        with pytest.raises(ValueError, match="plain name"):
            st.complete_task(0, counters={}, worker="w", found=[FoundRecord(0, "../x", (), "{}", 0)], children=[])
    with RunStore.open_existing(path) as st:
        assert st.found(0) == expected


def test_complete_task_writes_status_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    st = new_store(path)
    st.add_tasks([(0, (), -1)])
    written: list[str] = []

    def recording(write: Any) -> Any:
        def wrapper(file: Path, data: bytes, **kw: Any) -> None:
            written.append(file.relative_to(path).as_posix())
            write(file, data, **kw)

        return wrapper

    monkeypatch.setattr(task_table, "write_atomic", recording(write_atomic))
    monkeypatch.setattr(records, "write_atomic", recording(write_atomic))
    st.complete_task(
        0, counters={"states": 1}, worker="w", found=[FoundRecord(0, "dd", (0,), "{}", 0)], children=[(0,), (1,)]
    )
    st.close()
    order = [w for w in written if w.startswith("found/0/dd") or w.startswith("tasks/")]
    assert order == [
        "found/0/dd/zarr.json",
        "tasks/path/c/0/0",
        "tasks/info/c/0/0",
        "tasks/rank/c/0/0",
        "tasks/zarr.json",
        "tasks/counters/c/0/0",
        "tasks/info/c/0/0",
    ]


class Crash(Exception):
    """Stands in for the writer dying at one point of `complete_task`."""


@pytest.mark.parametrize("step", ["commit", "write_counters", "mark_done"])
def test_a_crash_before_the_status_leaves_a_rerunnable_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    path = tmp_path / "s"
    with new_store(path) as st:
        st.add_tasks([(0, (), -1), (0, (0,), 0)])
        st.complete_task(0, counters={}, worker="w", found=[], children=[(0,)])
        with monkeypatch.context() as m:
            m.setattr(task_table.TaskTable, step, lambda *a: (_ for _ in ()).throw(Crash()))
            with pytest.raises(Crash):
                st.complete_task(
                    1,
                    counters={},
                    worker="w",
                    found=[FoundRecord(0, D("dd"), (0,), G("dd"), 1)],
                    children=[(0, 1), (0, 2)],
                )
        with pytest.raises(StoreError, match="earlier write failed"):
            st.add_tasks([(0, (1,), 0)])
    with new_store(path) as st:
        assert [t.row for t in st.pending()] == ([1] if step == "commit" else [1, 2, 3])
        assert D("dd") in st.found(0)  # harmless: the rerun finds it again
        assert st.complete_task(1, counters={}, worker="w", found=[], children=[(0, 1), (0, 2)]) == [2, 3]
        assert [t.path for t in st.pending()] == [(0, 1), (0, 2)]
        rows = [(t.row, t.parent, t.done) for t in st.tasks()]
        assert rows == [(0, -1, True), (1, 0, True), (2, 1, False), (3, 1, False)]


def test_pending_after_reopen_and_many_rows(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with new_store(path) as st:
        run_to_end(st, limit=300)
        before = st.tasks()
    with new_store(path) as st:
        assert st.tasks() == before
        assert st.pending() == [t for t in before if not t.done]
        assert len(before) > task_table.CHUNK_ROWS  # spans two chunks
        run_to_end(st, limit=50)
        check_invariants(st)
        assert st.task_summary()["done"] == 350


def test_kill_free_run_gives_the_same_result(filled: Path) -> None:
    """The reference for the kill test: one uninterrupted run finds the tree and the best paths."""
    with RunStore.open_existing(filled) as st:
        nodes, best = expected_tree()
        assert {(t.fragment, t.path) for t in st.tasks()} == nodes and not st.pending()
        assert {f: {d: r.path for d, r in st.found(f).items()} for f in best} == best


def test_chunks_are_encoded_as_zarr_encodes_them(tmp_path: Path) -> None:
    block = (np.arange(task_table.CHUNK_ROWS * 4).reshape(-1, 4) % 11 - 2).astype(np.int64)
    arr = zarr.create_array(
        store=str(tmp_path / "z"), shape=block.shape, chunks=block.shape, dtype="int64", compressors=compressors()
    )
    arr[:] = block
    assert (tmp_path / "z" / "c" / "0" / "0").read_bytes() == encode_chunk(block)


# ------------------------------------------------------------------ kill -9


def _writer(path: str, limit: int | None = None) -> None:
    """In a forked child: resume the run in `path` and work until killed, done or `limit` completions."""
    with new_store(Path(path)) as st:
        run_to_end(st, worker=f"w{os.getpid()}", limit=limit)
    os._exit(0)


def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    path = tmp_path / "run.zarr"
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(1234)
    done_counts = []
    for _ in range(10):
        child = ctx.Process(target=_writer, args=(str(path),))
        child.start()
        time.sleep(rng.uniform(0.0, 0.25))
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        if not path.exists():  # killed before the store was renamed into place
            continue
        with RunStore.open_existing(path) as st:
            check_invariants(st)
            done_counts.append(st.task_summary()["done"])
    assert len(done_counts) >= 5 and done_counts == sorted(done_counts)
    child = ctx.Process(target=_writer, args=(str(path),))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert [p.name for p in tmp_path.iterdir()] == ["run.zarr"]  # no half-built stores left beside it
    with new_store(path) as st:
        check_invariants(st)
        nodes, best = expected_tree()
        assert {(t.fragment, t.path) for t in st.tasks()} == nodes and not st.pending()
        assert {f: {d: r.path for d, r in st.found(f).items()} for f in best} == best
        assert len(st.task_summary()["workers"]) >= 2
    assert not list(path.rglob("*.mugraph-tmp"))  # the writer's open removed what kills left


# ------------------------------------------------------------------ damage


@pytest.fixture(scope="module")
def filled_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("filled") / "s"
    with new_store(path) as st:
        run_to_end(st)
    return path


@pytest.fixture
def filled(filled_once: Path, tmp_path: Path) -> Path:
    """A finished store of 726 tasks (two chunks per array) with found μGraphs; a private copy."""
    return Path(shutil.copytree(filled_once, tmp_path / "s"))


@pytest.mark.parametrize(
    ("file", "damage"),
    [
        ("zarr.json", "json"),
        ("tasks/zarr.json", "json"),
        ("tasks/info/zarr.json", "json"),
        ("tasks/zarr.json", "rows"),
        ("tasks/path/c/0/0", "flip"),
        ("tasks/counters/c/1/0", "flip"),
        ("tasks/info/c/1/0", "truncate"),
        ("tasks/path/c/1/0", "truncate"),
        ("tasks/info/c/1/0", "delete"),
        ("tasks/counters/c/0/0", "delete"),
        ("tasks/path/c/0/0", "delete"),
        ("tasks/rank/c/1/0", "flip"),
        ("tasks/rank/c/0/0", "delete"),
        ("tasks/rank/zarr.json", "delete"),
        ("fragments/zarr.json", "json"),
    ],
)
def test_damage_is_reported_with_the_file(filled: Path, file: str, damage: str) -> None:
    target = filled / file
    data = target.read_bytes()
    if damage == "json":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "rows":  # valid JSON, wrong value: only the checksum can tell
        meta = json.loads(data)
        meta["attributes"]["rows"] -= 1
        target.write_text(json.dumps(meta))
    elif damage == "flip":
        target.write_bytes(data[:10] + bytes([data[10] ^ 0x40]) + data[11:])
    elif damage == "truncate":
        target.write_bytes(data[: len(data) - 7])
    else:
        target.unlink()
    for opener in openers(filled):
        with pytest.raises(StoreDamaged) as err:
            opener()
        msg = str(err.value)
        assert str(target) in msg and "--fresh" in msg and "\n" not in msg


def test_an_old_commit_record_is_damage_for_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with new_store(path) as st:
        run_to_end(st, limit=10)
        old = (path / "tasks" / "zarr.json").read_bytes()
        run_to_end(st, limit=10)
    (path / "tasks" / "zarr.json").write_bytes(old)  # intact, but from an earlier commit
    with pytest.raises(StoreDamaged, match=f"{path / 'tasks' / 'zarr.json'}: the commit record"):
        new_store(path)
    with RunStore.open_existing(path) as st:  # a reader cannot tell it from a live writer: a snapshot
        check_invariants(st)
        assert st.task_summary()["done"] == 10


def test_readers_beside_a_live_writer_see_consistent_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "run.zarr"
    new_store(path).close()
    child = multiprocessing.get_context("fork").Process(target=_writer, args=(str(path), 300))
    child.start()
    reads = 0
    while child.is_alive() or not reads:
        with RunStore.open_existing(path) as st:
            check_invariants(st)
        reads += 1
    child.join()
    assert child.exitcode == 0 and reads >= 3


def test_a_reader_keeps_a_record_rewritten_by_a_task_newer_than_its_snapshot(tmp_path: Path) -> None:
    """A done task's μGraph stays visible to a reader whose task table predates the task that
    later found the same μGraph at a smaller path and rewrote its record (its row is past the
    reader's rows). Dropping such records lost the μGraph from the reader's view altogether."""
    path = tmp_path / "run.zarr"
    counters = {"states": 1.0, "depth": 0.0}
    graph = G("dshared")
    with new_store(path) as st:
        st.set_fragments(FRAGMENTS[:1])
        (root,) = st.add_tasks([(0, (), -1)])
        first, _ = st.complete_task(
            root,
            counters=counters,
            worker="w0",
            children=[(0,), (1,)],
            found=[FoundRecord(0, D("dshared"), (1, 0), graph, root)],
        )
        with RunStore.open_existing(path) as reader:  # its table: the root (done) and two pending rows
            (newer,) = st.complete_task(first, counters=counters, worker="w0", children=[(0, 0)], found=[])
            st.complete_task(
                newer,
                counters=counters,
                worker="w0",
                children=[],
                found=[FoundRecord(0, D("dshared"), (0, 0, 1), graph, newer)],
            )
            assert newer >= len(reader.tasks())
            assert reader.tasks()[root].done
            assert reader.found(0)[D("dshared")].path == (0, 0, 1)


def test_damaged_found_records(filled: Path) -> None:
    base = filled / "found" / "0"
    first, second = sorted(p for p in base.iterdir() if p.is_dir())[:2]
    original = (first / "zarr.json").read_text()
    meta = json.loads(original)
    meta["attributes"]["graph"] += " "  # still valid JSON, and still a string
    (first / "zarr.json").write_text(json.dumps(meta))
    with RunStore.open_existing(filled) as st:
        with pytest.raises(StoreDamaged, match=str(first / "zarr.json")):
            st.found(0)
        assert st.found(1)
    (first / "zarr.json").write_text(original)
    (second / "zarr.json").write_text("{")
    with RunStore.open_existing(filled) as st, pytest.raises(StoreDamaged, match=str(second / "zarr.json")):
        st.found(0)
    (second / "zarr.json").unlink()  # a committed record that is gone is damage, found at open
    with pytest.raises(StoreDamaged, match=str(second / "zarr.json") + ".*committed.*--fresh"):
        RunStore.open_existing(filled)


def test_size_bytes(filled: Path) -> None:
    with RunStore.open_existing(filled) as st:
        assert st.size_bytes() > 10_000


@pytest.fixture(scope="module")
def unfinished_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("unfinished") / "s"
    with new_store(path) as st:
        run_to_end(st, limit=120)
        st.put_confirmation(0, D("d0x1"), confirmation(D("d0x1")))
        st.put_layout(0, D("d0x1"), layout(D("d0x1")))
        assert st.pending() and st.found(0)
    return path


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "unfinished"])
@pytest.mark.parametrize(
    "remove",
    [
        "found/0/{d}/zarr.json",
        "found/0/{d}",
        "found/0",
        "found",
        "fragments/zarr.json",
        "confirmations/0/{d}",
        "layouts/0/{d}/zarr.json",
        "ledger.jsonl",
    ],
)
def test_a_missing_committed_record_is_damage(
    finished: bool, remove: str, filled_once: Path, unfinished_once: Path, tmp_path: Path
) -> None:
    store = Path(shutil.copytree(filled_once if finished else unfinished_once, tmp_path / "s"))
    if remove.startswith(("confirmations", "layouts")) and finished:
        with RunStore.open_existing(store, readonly=False) as st:
            st.put_confirmation(0, D("d0x1"), confirmation(D("d0x1")))
            st.put_layout(0, D("d0x1"), layout(D("d0x1")))
    target = store / remove.format(d=D("d0x1"))
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    for writer in (False, True):
        with pytest.raises(StoreDamaged, match="--fresh") as info:
            new_store(store) if writer else RunStore.open_existing(store)
        assert ("zarr.json" in str(info.value) or LEDGER_NAME in str(info.value)) and str(store) in str(info.value)
        if remove.endswith((".json", ".jsonl")):
            assert str(target) in str(info.value)


def test_a_torn_ledger_line_is_dropped(filled: Path) -> None:
    ledger = filled / LEDGER_NAME
    whole = ledger.read_bytes()
    ledger.write_bytes(whole + b'{"record": "found/0/zz')  # a crash mid-append
    with RunStore.open_existing(filled) as st:
        assert st.found(0)
    with new_store(filled) as st:
        assert st.found(0)
    assert ledger.read_bytes() == whole
    ledger.write_bytes(whole.replace(b'"crc32": ', b'"crc32": 1', 1))
    with pytest.raises(StoreDamaged, match=f"{LEDGER_NAME}: line 1"):
        RunStore.open_existing(filled)


def _make_unranked(path: Path) -> None:
    """Turn the store at `path` into one written before ranks were kept: no rank array, and a commit
    record without `ranked` (rewritten as that version wrote it, checksum and all)."""
    with new_store(path) as st:
        attrs = zarr_sync(records.read_record(st._store, path, "tasks"))
        assert attrs is not None and attrs.pop("ranked") is True
        records.write_record(st._store, "tasks", attrs)
    shutil.rmtree(path / "tasks" / "rank")


def test_a_store_from_before_ranks_resumes_unranked(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with new_store(path) as st:
        run_to_end(st, limit=5)
        before = [(t.row, t.path, t.done) for t in st.tasks()]
    _make_unranked(path)
    with new_store(path) as st:
        assert [(t.row, t.path, t.done) for t in st.tasks()] == before
        assert all(t.rank is None for t in st.tasks())
        pending = st.pending()[0]
        kids = st.complete_tasks([TaskCompletion(pending.row, {}, "w1", [], [(*pending.path, 9)], ranks=[4])])[0]
        assert st.tasks()[kids[0]].rank is None  # this table keeps no ranks
    assert not (path / "tasks" / "rank").exists()
    with RunStore.open_existing(path) as st:
        assert st.tasks()[pending.row].done
        assert (st.tasks()[kids[0]].path, st.tasks()[kids[0]].rank) == ((*pending.path, 9), None)


def test_a_store_deleted_under_its_run_says_to_remove_what_is_left(tmp_path: Path) -> None:
    """`--fresh` refuses to delete what a run writes after its store was deleted (no run store any
    more), so the message names the removal instead."""
    from mugraph.storage.run.errors import StoreDamaged

    path = tmp_path / "run.zarr"
    st = RunStore.open(path, IDENTITY, meta={"argv": ["test"]}, counter_names=COUNTERS)
    try:
        shutil.rmtree(path)
        with pytest.raises(StoreDamaged, match=r"removed while the run was writing.*remove .*run\.zarr \(rm -r\)"):
            st.set_fragments(FRAGMENTS)  # a record the ledger lists
    finally:
        with contextlib.suppress(Exception):
            st.close()
