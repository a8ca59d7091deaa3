"""The run-store contract: what every backend of `RunStoreWriter` must do, whatever it keeps its
records in. tests/storage/test_run_contract.py runs it against the Zarr store and the memory store;
a backend joins by subclassing `RunStoreContract` with a `backend` fixture.

It states the seam, not a format: round trips of every record kind (find times included), what a
reopened store returns (a resumed run), what an open and a write refuse, and the order the driver
relies on (rows in the order added, the same calls giving the same rows and records).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest

from mugraph.storage.run.errors import StoreBusy, StoreError, StoreMismatch
from mugraph.storage.run.protocol import RunStoreReader, RunStoreWriter
from mugraph.storage.run.task_records import FoundRecord, TaskCompletion
from tests.helpers.graphs import digest_of as D
from tests.helpers.graphs import graph_of as G
from tests.helpers.run_store import FRAGMENTS, IDENTITY, confirmation, layout

__all__ = ["Backend", "RunStoreContract"]


class Backend(Protocol):
    """How a test opens stores of one backend; one path names one store."""

    def open(
        self,
        path: Path,
        identity: Mapping[str, str] = ...,
        *,
        counter_names: Sequence[str] = ...,
        fresh: bool = ...,
    ) -> RunStoreWriter: ...

    def open_existing(self, path: Path, *, readonly: bool = ...) -> RunStoreReader: ...


def _measurement(digest: str) -> dict[str, Any]:
    return {"digest": digest, "worker": "tcp://gpu", "wall_seconds": 1.0, "ok": True, "median_seconds": 2e-5}


def _sample(invocation: int, seconds: float, states: int) -> dict[str, Any]:
    return {"seconds": seconds, "invocation": invocation, "states": states, "fragments": {}}


def _found(fragment: int, key: str, path: tuple[int, ...], row: int, seconds: float, states: int) -> FoundRecord:
    return FoundRecord(fragment, D(key), path, G(key), row, seconds, states)


def _fill(store: RunStoreWriter) -> None:
    """A run as a driver writes it: two levels of tasks per fragment, finds with their find times,
    every record kind once."""
    store.set_fragments(FRAGMENTS)
    roots = store.add_tasks([(f, (), -1) for f in range(len(FRAGMENTS))])
    kids = store.complete_tasks(
        [
            TaskCompletion(
                row,
                {"states": 10.0 * (f + 1), "depth": 0.0},
                f"w{f % 2}",
                [_found(f, f"a{f}", (), row, 1.5 + f, 100 + f)],
                [(0,), (1,)],
            )
            for f, row in enumerate(roots)
        ]
    )
    store.complete_tasks(
        [TaskCompletion(kids[0][0], {"states": 3.0}, "w1", [_found(0, "b0", (0,), kids[0][0], 7.25, 4000)], [])]
    )
    for f in range(len(FRAGMENTS)):
        store.put_confirmation(f, D(f"a{f}"), {**confirmation(D(f"a{f}")), "run_seconds": 2.0 + f})
        store.put_layout(f, D(f"a{f}"), layout(D(f"a{f}")))
    store.put_measurement(0, D("a0"), _measurement(D("a0")))  # type: ignore[arg-type]
    store.put_ranking(0, [{"digest": D("a0"), "estimated_seconds": 1e-5}])
    store.put_timeline(0, [_sample(0, 1.0, 50), _sample(0, 8.0, 4100)])
    store.put_final({"complete": False, "best": D("a0"), "mugraphs": [D("a0")]})


def _everything(store: RunStoreReader) -> dict[str, Any]:
    """Every record a reader can get, find times spelled out (FoundRecord equality leaves them out)."""
    n = len(store.fragments())
    return {
        "fragments": store.fragments(),
        "tasks": store.tasks(),
        "pending": store.pending(),
        "summary": store.task_summary(),
        "found": [{d: (r, r.seconds, r.states) for d, r in store.found(i).items()} for i in range(n)],
        "confirmations": [store.confirmations(i) for i in range(n)],
        "layouts": [store.layouts(i) for i in range(n)],
        "measurements": [store.measurements(i) for i in range(n)],
        "rankings": [store.ranking(i) for i in range(n)],
        "timeline": store.timeline(),
        "final": store.final(),
        "identity": store.identity,
    }


class RunStoreContract:
    """What every run-store backend must do. Subclasses provide `backend`, a fresh `Backend`."""

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Backend:
        raise NotImplementedError

    @pytest.fixture
    def where(self, tmp_path: Path) -> Path:
        return tmp_path / "store"

    @pytest.fixture
    def store(self, backend: Backend, where: Path) -> Iterator[RunStoreWriter]:
        st = backend.open(where)
        yield st
        st.close()

    # ---------------------------------------------------------------- the protocol and a new store

    def test_is_a_writer_and_a_reader(self, store: RunStoreWriter) -> None:
        assert isinstance(store, RunStoreWriter)
        assert isinstance(store, RunStoreReader)

    def test_new_store_is_empty(self, store: RunStoreWriter) -> None:
        assert store.created
        assert store.identity == IDENTITY
        assert (store.fragments(), store.tasks(), store.pending(), store.timeline()) == ([], [], [], [])
        assert store.final() is None
        assert store.task_summary()["tasks"] == 0

    # ---------------------------------------------------------------- round trips

    def test_fragments_are_written_once(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        assert store.fragments() == FRAGMENTS
        store.set_fragments(FRAGMENTS)  # the same list: nothing happens
        with pytest.raises(StoreMismatch):
            store.set_fragments(FRAGMENTS[:2])
        assert store.fragments() == FRAGMENTS

    def test_tasks_take_rows_in_order_once(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        assert store.add_tasks([(0, (), -1), (1, (), -1), (0, (2,), 0)]) == [0, 1, 2]
        assert store.add_tasks([(0, (2,), 0), (2, (), -1)]) == [2, 3]  # present: its row
        assert [(t.row, t.fragment, t.path, t.parent, t.done) for t in store.tasks()] == [
            (0, 0, (), -1, False),
            (1, 1, (), -1, False),
            (2, 0, (2,), 0, False),
            (3, 2, (), -1, False),
        ]
        assert [t.row for t in store.pending()] == [0, 1, 2, 3]

    def test_bad_tasks_are_refused(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        store.add_tasks([(0, (), -1)])
        for bad in ([(5, (), -1)], [(1, (0,), 0)], [(0, (-1,), -1)], [(0, (1,), 9)]):
            with pytest.raises(ValueError):
                store.add_tasks(bad)
        assert len(store.tasks()) == 1

    def test_completed_tasks_round_trip(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        (root,) = store.add_tasks([(1, (), -1)])
        kids = store.complete_tasks([TaskCompletion(root, {"states": 5.0}, "w7", [], [(3,), (1,)])])
        assert kids == [[1, 2]]
        done, *rest = store.tasks()
        assert (done.done, done.worker, done.counters) == (True, "w7", {"states": 5.0, "depth": 0.0})
        assert [(t.path, t.parent, t.fragment, t.done, t.worker, t.counters) for t in rest] == [
            ((3,), root, 1, False, "", {}),
            ((1,), root, 1, False, "", {}),
        ]
        summary = store.task_summary()
        assert (summary["tasks"], summary["done"], summary["pending"]) == (3, 1, 2)
        assert summary["fragments"] == {1: {"done": 1, "pending": 2}}
        assert summary["counters"] == {"states": 5.0, "depth": 0.0}
        assert summary["workers"] == {"w7": 1}

    def test_a_done_task_keeps_its_counters(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        (root,) = store.add_tasks([(0, (), -1)])
        store.complete_tasks([TaskCompletion(root, {"states": 5.0}, "w1", [], [(0,)])])
        assert store.complete_tasks([TaskCompletion(root, {"states": 9.0}, "w2", [], [(0,), (1,)])]) == [[1, 2]]
        assert store.tasks()[root].counters["states"] == 5.0
        assert store.tasks()[root].worker == "w1"

    def test_children_keep_their_ranks(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        (root,) = store.add_tasks([(0, (), -1)])
        assert store.tasks()[root].rank is None  # a root is added unranked
        done = TaskCompletion(root, {}, "w1", [], [(2,), (0, 1), (5,)], ranks=[0, 3, 2**40])
        kids = store.complete_tasks([done])[0]
        assert [(t.row, t.rank) for t in store.pending()] == list(zip(kids, [0, 3, 2**40], strict=True))
        again = TaskCompletion(kids[0], {}, "w1", [], [(2, 0), (0, 1)], ranks=[7, 9])  # (0, 1) is present
        (grand,) = store.complete_tasks([again])
        assert [store.tasks()[r].rank for r in grand] == [7, 3]  # a row present keeps its rank
        (unranked,) = store.complete_tasks([TaskCompletion(kids[1], {}, "w1", [], [(0, 1, 4)])])
        assert store.tasks()[unranked[0]].rank is None

    def test_bad_ranks_are_refused_before_anything_is_written(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        (root,) = store.add_tasks([(0, (), -1)])
        for ranks in ([1], [1, 2, 3], [-1, 0], [0, 2**62], [True, 0], [0.5, 1]):
            with pytest.raises(ValueError):
                store.complete_tasks([TaskCompletion(root, {}, "w1", [], [(0,), (1,)], ranks=ranks)])  # type: ignore[arg-type]
        assert [(t.row, t.done) for t in store.tasks()] == [(root, False)]

    def test_found_records_round_trip_with_find_times(self, store: RunStoreWriter) -> None:
        _fill(store)
        found = store.found(0)
        assert sorted(found) == sorted([D("a0"), D("b0")])
        a0, b0 = found[D("a0")], found[D("b0")]
        assert (a0.path, a0.graph, a0.task, a0.seconds, a0.states) == ((), G("a0"), 0, 1.5, 100)
        assert (b0.path, b0.task, b0.seconds, b0.states) == ((0,), 3, 7.25, 4000)
        assert {(r.seconds, r.states) for r in store.found(2).values()} == {(3.5, 102)}

    def test_found_without_find_time_reads_as_none(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        (root,) = store.add_tasks([(0, (), -1)])
        store.complete_tasks([TaskCompletion(root, {}, "w", [FoundRecord(0, D("x"), (), G("x"), root)], [])])
        rec = store.found(0)[D("x")]
        assert (rec.seconds, rec.states) == (None, None)

    def test_found_again_keeps_smaller_path_and_first_find_time(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        (root,) = store.add_tasks([(0, (), -1)])
        (kids,) = store.complete_tasks([TaskCompletion(root, {}, "w", [_found(0, "x", (5, 5), root, 3.0, 30)], [(1,)])])
        store.complete_tasks([TaskCompletion(kids[0], {}, "w", [_found(0, "x", (1,), kids[0], 9.0, 90)], [])])
        rec = store.found(0)[D("x")]
        assert (rec.path, rec.task, rec.seconds, rec.states) == ((1,), kids[0], 3.0, 30)
        (more,) = store.add_tasks([(0, (9,), root)])  # a longer path later: nothing changes
        store.complete_tasks([TaskCompletion(more, {}, "w", [_found(0, "x", (9, 9, 9), more, 20.0, 200)], [])])
        rec = store.found(0)[D("x")]
        assert (rec.path, rec.seconds, rec.states) == ((1,), 3.0, 30)

    def test_bad_find_times_are_refused(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        (root,) = store.add_tasks([(0, (), -1)])
        for seconds, states in ((-1.0, 3), (math.inf, 3), (1.0, -3), (1.0, None)):
            rec = FoundRecord(0, D("x"), (), G("x"), root, seconds, states)
            with pytest.raises(ValueError):
                store.complete_tasks([TaskCompletion(root, {}, "w", [rec], [])])
        assert store.found(0) == {}
        assert not store.tasks()[root].done

    def test_a_bad_item_leaves_the_batch_unwritten(self, store: RunStoreWriter) -> None:
        store.set_fragments(FRAGMENTS)
        a, b = store.add_tasks([(0, (), -1), (1, (), -1)])
        good = TaskCompletion(a, {"states": 1.0}, "w", [_found(0, "x", (), a, 1.0, 1)], [(0,)])
        for bad in (
            TaskCompletion(b, {"nope": 1.0}, "w", [], []),
            TaskCompletion(b, {"states": math.nan}, "w", [], []),
            TaskCompletion(b, {}, "w", [_found(0, "y", (), b, 1.0, 1)], []),  # another fragment's row
            TaskCompletion(b, {}, "w", [FoundRecord(1, "no/such", (), G("y"), b)], []),
            TaskCompletion(99, {}, "w", [], []),
        ):
            with pytest.raises(ValueError):
                store.complete_tasks([good, bad])
        assert [t.done for t in store.tasks()] == [False, False]
        assert store.found(0) == {}

    def test_keyed_records_round_trip(self, store: RunStoreWriter) -> None:
        _fill(store)
        conf = store.confirmations(1)[D("a1")]
        assert conf == {**confirmation(D("a1")), "run_seconds": 3.0}
        assert store.layouts(2) == {D("a2"): layout(D("a2"))}
        assert store.measurements(0) == {D("a0"): _measurement(D("a0"))}
        assert store.measurements(1) == {}
        store.put_confirmation(1, D("a1"), confirmation(D("a1"), equivalent=False))  # replaced
        assert store.confirmations(1)[D("a1")]["equivalent"] is False
        with pytest.raises(ValueError):
            store.put_layout(0, "../x", layout("../x"))
        with pytest.raises(ValueError):
            store.put_layout(7, D("a0"), layout(D("a0")))

    def test_run_records_round_trip(self, store: RunStoreWriter) -> None:
        _fill(store)
        assert store.ranking(0) == [{"digest": D("a0"), "estimated_seconds": 1e-5}]
        assert store.ranking(1) is None
        store.put_timeline(2, [_sample(2, 1.0, 5)])
        store.put_timeline(1, [_sample(1, 3.0, 4)])
        assert [[s["invocation"] for s in inv] for inv in store.timeline()] == [[0, 0], [1], [2]]
        store.put_timeline(1, [_sample(1, 3.0, 4), _sample(1, 4.0, 6)])  # replaced as the invocation goes on
        assert [len(inv) for inv in store.timeline()] == [2, 2, 1]
        assert store.final() == {"complete": False, "best": D("a0"), "mugraphs": [D("a0")]}
        store.put_final({"complete": True, "best": D("a0"), "mugraphs": [D("a0")]})
        final = store.final()
        assert final is not None and final["complete"]
        with pytest.raises(ValueError):
            store.put_timeline(-1, [])

    def test_experts_round_trip_in_the_programs_order(self, backend: Backend, where: Path) -> None:
        with backend.open(where) as st:
            assert st.experts() is None  # a store made before the record was kept reads the same
            st.put_experts([{"label": "zeta 2", "digest": D("a1")}, {"label": "alpha", "digest": D("a0")}])
            st.put_experts([{"label": "wide", "digest": D("a1")}, {"label": "mine", "digest": D("a0")}])
            for bad in ({"label": "a\nb", "digest": D("a0")}, {"label": "ok", "digest": "../x"}):
                with pytest.raises(ValueError):
                    st.put_experts([bad])  # type: ignore[list-item]
        with backend.open_existing(where) as reader:  # replaced whole by each invocation
            assert reader.experts() == [{"label": "wide", "digest": D("a1")}, {"label": "mine", "digest": D("a0")}]
        with backend.open(where) as again:
            again.put_experts([])  # the program names none now
            assert again.experts() == []

    def test_records_given_back_are_copies(self, store: RunStoreWriter) -> None:
        _fill(store)
        store.fragments()[0]["name"] = "changed"
        store.confirmations(0)[D("a0")]["equivalent"] = False
        (store.ranking(0) or [{}])[0]["digest"] = "changed"
        store.tasks()[0].counters["states"] = -1.0
        assert store.fragments() == FRAGMENTS
        assert store.confirmations(0)[D("a0")]["equivalent"] is True
        assert (store.ranking(0) or [{}])[0]["digest"] == D("a0")
        assert store.tasks()[0].counters["states"] == 10.0

    def test_size_grows_with_records(self, store: RunStoreWriter) -> None:
        before = store.size_bytes()
        _fill(store)
        assert store.size_bytes() > before > 0

    # ---------------------------------------------------------------- reopening (a resumed run)

    def test_reopened_store_returns_what_was_written(self, backend: Backend, where: Path) -> None:
        with backend.open(where) as st:
            _fill(st)
            written = _everything(st)
        with backend.open(where) as again:
            assert not again.created
            assert _everything(again) == written
            rows = again.add_tasks([(f, (), -1) for f in range(len(FRAGMENTS))])  # the driver's restart
            assert rows == [0, 1, 2]
        with backend.open_existing(where) as reader:
            assert _everything(reader) == written

    def test_resume_keeps_pending_ranks(self, backend: Backend, where: Path) -> None:
        with backend.open(where) as st:
            st.set_fragments(FRAGMENTS)
            (root,) = st.add_tasks([(1, (), -1)])
            st.complete_tasks([TaskCompletion(root, {}, "w1", [], [(4,), (6,)], ranks=[11, 2])])
        with backend.open(where) as again:
            assert [(t.path, t.rank) for t in again.pending()] == [((4,), 11), ((6,), 2)]

    def test_resume_keeps_earlier_find_times(self, backend: Backend, where: Path) -> None:
        with backend.open(where) as st:
            _fill(st)
        with backend.open(where) as again:
            (pending, *_) = again.pending()
            assert pending.fragment == 0
            again.complete_tasks(
                [TaskCompletion(pending.row, {}, "w9", [_found(0, "a0", (1,), pending.row, 50.0, 9999)], [])]
            )
            rec = again.found(0)[D("a0")]
            assert (rec.path, rec.seconds, rec.states) == ((), 1.5, 100)  # () is smaller: nothing changes
            assert again.found(0)[D("b0")].seconds == 7.25

    def test_fresh_starts_over(self, backend: Backend, where: Path) -> None:
        with backend.open(where) as st:
            _fill(st)
        with backend.open(where, fresh=True) as st:
            assert st.created
            assert (st.tasks(), st.fragments(), st.final()) == ([], [], None)

    # ---------------------------------------------------------------- what an open and a write refuse

    def test_another_runs_identity_is_refused(self, backend: Backend, where: Path) -> None:
        with backend.open(where) as st:
            _fill(st)
        with pytest.raises(StoreMismatch):
            backend.open(where, {**IDENTITY, "budget": "2"})
        with pytest.raises(StoreMismatch):
            backend.open(where, counter_names=("other",))
        with pytest.raises(ValueError):
            backend.open(where, {"budget": 3})  # type: ignore[dict-item]
        with backend.open(where) as again:  # nothing was lost
            assert len(again.tasks()) == 9

    def test_one_writer_at_a_time(self, backend: Backend, where: Path, store: RunStoreWriter) -> None:
        with pytest.raises(StoreBusy):
            backend.open(where)
        with pytest.raises(StoreBusy):
            backend.open_existing(where, readonly=False)
        store.close()
        with backend.open(where) as st:
            assert not st.created

    def test_a_reader_is_told_of_the_writer_now(self, backend: Backend, where: Path, store: RunStoreWriter) -> None:
        _fill(store)
        with backend.open_existing(where) as reader:
            assert store.writer() == os.getpid() and reader.writer() == os.getpid()
            store.close()
            assert reader.writer() is None
        with backend.open_existing(where) as later:
            assert later.writer() is None

    def test_a_reader_cannot_write(self, backend: Backend, where: Path) -> None:
        with backend.open(where) as st:
            _fill(st)
        with backend.open_existing(where) as reader:
            assert isinstance(reader, RunStoreReader)
            writer: Any = reader
            with pytest.raises(StoreError):
                writer.put_final({"complete": True})
            with pytest.raises(StoreError):
                writer.add_tasks([(0, (7,), 0)])
        with pytest.raises(StoreError):
            backend.open_existing(where.parent / "missing")

    def test_a_closed_store_refuses_writes(self, store: RunStoreWriter) -> None:
        store.close()
        with pytest.raises(StoreError):
            store.set_fragments(FRAGMENTS)

    # ---------------------------------------------------------------- determinism

    def test_same_calls_give_same_records(self, backend: Backend, tmp_path: Path) -> None:
        out = []
        for name in ("one", "two"):
            with backend.open(tmp_path / name) as st:
                _fill(st)
                out.append(_everything(st))
        assert out[0] == out[1]
        assert [t.row for t in out[0]["tasks"]] == list(range(len(out[0]["tasks"])))
