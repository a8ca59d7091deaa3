"""Reading find times: `best_at`, `find_line` and the exact best-so-far curve, on the memory run store
(the same protocol as the Zarr store, which tests/pipeline/test_find_times.py runs for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mugraph.dashboards.find_times import best_at, best_found, find_line, run_seconds
from mugraph.dashboards.summary import best_so_far
from mugraph.storage.run.task_records import FoundRecord, TaskCompletion
from tests.helpers.graphs import digest_of as D
from tests.helpers.graphs import graph_of as G
from tests.helpers.memory_run_store import MemoryRunStore, MemoryRunStores
from tests.helpers.run_store import COUNTERS, FRAGMENTS, IDENTITY

# μGraph key → (find seconds, states, estimated seconds); the reference takes 4.0
FINDS = {"slow": (2.0, 100, 8.0), "good": (10.0, 900, 2.0), "best": (30.0, 5000, 1.0), "unranked": (5.0, 400, None)}


def _row(digest: str, seconds: float, reference: bool = False) -> dict[str, Any]:
    return {"digest": digest, "estimated_seconds": seconds, "reference": reference, "profile": "H100"}


def _store(times: bool = True) -> MemoryRunStore:
    st = MemoryRunStores().open(Path("run"), IDENTITY, counter_names=COUNTERS)
    st.set_fragments(FRAGMENTS)
    (root,) = st.add_tasks([(1, (), -1)])
    found = [
        FoundRecord(1, D(k), (), G(k), root, s if times else None, n if times else None)
        for k, (s, n, _) in FINDS.items()
    ]
    st.complete_tasks([TaskCompletion(root, {}, "w", found, [])])
    ranking = [_row(D(k), t) for k, (_, _, t) in FINDS.items() if t is not None] + [_row("ref", 4.0, reference=True)]
    st.put_ranking(1, sorted(ranking, key=lambda r: r["estimated_seconds"]))
    st.put_timeline(0, [{"seconds": 20.0, "elapsed": 20.0}])
    st.put_timeline(1, [{"seconds": 5.0}, {"seconds": 40.0}])  # a resumed run: 60 s in all
    return st


def test_run_seconds_add_up_invocations() -> None:
    assert run_seconds(_store().timeline()) == 60.0
    assert run_seconds([]) == 0.0


@pytest.mark.parametrize(
    ("fraction", "key", "speedup"),
    [(0.0, None, None), (1 / 30, "slow", 0.5), (0.1, "slow", 0.5), (1 / 6, "good", 2.0), (0.49, "good", 2.0)]
    + [(0.5, "best", 4.0), (1.0, "best", 4.0)],
)
def test_best_at_takes_what_was_found_by_then(fraction: float, key: str | None, speedup: float | None) -> None:
    b = best_at(_store(), "f1", fraction)
    assert b is not None
    assert (b["digest"], b["speedup"]) == (D(key) if key else None, speedup)
    assert b["seconds"] == pytest.approx(60.0 * fraction) and b["run_seconds"] == 60.0
    assert b["best_speedup"] == 4.0 and b["timing"] == "estimated on H100"
    if key is not None:
        assert (b["found_seconds"], b["found_states"]) == FINDS[key][:2]


def test_best_at_by_index_and_its_refusals() -> None:
    st = _store()
    assert best_at(st, 1, 0.5) == best_at(st, "f1", 0.5)
    assert best_at(st, 0, 0.5) is None  # no ranking for that fragment
    for fragment, fraction in (("nope", 0.5), (7, 0.5), (1, 1.5), (1, -0.1)):
        with pytest.raises(ValueError):
            best_at(st, fragment, fraction)
    assert best_at(_store(times=False), 1, 0.5) is None  # a store from before find times: nothing guessed


def test_find_line_names_the_fastest_ranked_find() -> None:
    st = _store()
    found, ranking = st.found(1), st.ranking(1) or []
    assert best_found(found, ranking) == (D("best"), 4.0)
    want = "best first found after 30.0 s of search (5,000 states; 50% of the run's search time)"
    assert find_line(found, ranking, 60.0) == want
    assert find_line(found, ranking, 20.0) == want.replace("50%", "100%")
    assert find_line(_store(times=False).found(1), ranking, 60.0) is None
    assert find_line(found, [r for r in ranking if not r["reference"]], 60.0) is None
    kept = [ranking[-1], *ranking[:-1]]  # the reference ranked first (kept within the model's error)
    assert find_line(found, kept, 60.0) == want.replace("best", "fastest μGraph")
    # the reference first, and the search found the reference's own graph: still the fastest μGraph's find,
    # not "best found at" beside "best the reference program"
    ref = next(r for r in ranking if r["reference"])
    own = [{**ref, "digest": D("best")}, *(r for r in ranking if not r["reference"])]
    line = find_line(found, own, 60.0)
    assert line is not None and line.startswith("fastest μGraph first found after"), line


def test_of_tied_best_the_first_found_is_when_the_best_came() -> None:
    """Two μGraphs of one estimated time, ranked apart by later keys: the run held the best speedup
    from the earlier find on, as the report's best-so-far curve says."""
    st = _store()
    found, ranking = st.found(1), st.ranking(1) or []
    tied = [{**r, "estimated_seconds": 1.0} if r["digest"] == D("good") else r for r in ranking]
    tied.sort(key=lambda r: (r["estimated_seconds"], r["digest"] != D("best")))  # the later find ranked first
    assert tied[0]["digest"] == D("best")
    assert (
        find_line(found, tied, 60.0)
        == "best first found after 10.0 s of search (900 states; 17% of the run's search time)"
    )


def test_best_so_far_is_exact_with_find_times() -> None:
    st = _store()
    found, ranking = st.found(1), st.ranking(1) or []
    at = {d: r.seconds for d, r in found.items() if r.seconds is not None}
    samples = [{"elapsed": 1.0, "fragments": {}}, {"elapsed": 60.0, "fragments": {}}]
    curve = best_so_far(samples, "f1", list(found), ranking, at)
    assert curve == [(2.0, 0.5), (5.0, 0.5), (10.0, 2.0), (30.0, 4.0), (60.0, 4.0)]
    # a find without its time: the approximation from the samples' counts, as before find times
    del at[D("good")]
    assert best_so_far(samples, "f1", list(found), ranking, at) == []
