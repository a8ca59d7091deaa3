"""Bundles: a search task carrying several frontier paths returns, per path, what that path's own task
would (so bundling changes how many Dask tasks run, never which nodes are visited), and a prefix of
them once it has spent its seconds; bundles form only when paths wait many times over for every worker
thread, and hold about BUNDLE_SECONDS of expected work; shallower paths run first; the driver waits for
a longer batch only while the queue covers the wait."""

from __future__ import annotations

import pytest

from mugraph.pipeline.bundling import (
    BUNDLE_SECONDS,
    BUNDLE_SHARE,
    BUNDLE_SLACK,
    MAX_BUNDLE,
    MAX_BUNDLE_SECONDS,
    SMALL_SHARE,
    BundleRule,
    DepthTimes,
    bundle_seconds,
    bundle_size,
    bundles,
    plan_bundles,
    queued_seconds,
    rank_priority,
    search_priority,
)
from mugraph.pipeline.dispatch import WARM_PRIORITY
from mugraph.pipeline.driver import LINGER_COVER, LINGER_SECONDS, LINGER_SHARE, linger_seconds
from mugraph.pipeline.plan import make_plan
from mugraph.pipeline.task_keys import bundle_key, task_key
from mugraph.pipeline.worker import search_task
from mugraph.programs import get_builtin
from tests.helpers.narrow import NARROW

BUDGET = 40


def test_a_bundle_returns_each_path_s_own_result() -> None:
    plan = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], BUDGET)
    payload = plan.fragments[0].payload
    (root,) = search_task(payload, ((),), BUDGET)
    paths = root.frontier[:4]
    assert len(paths) >= 2
    bundled = search_task(payload, paths, BUDGET)
    alone = [search_task(payload, (p,), BUDGET)[0] for p in paths]
    assert [r.path for r in bundled] == list(paths)
    for b, a in zip(bundled, alone, strict=True):
        assert b.frontier == a.frontier
        assert {f.digest: f.path for f in b.found} == {f.digest: f.path for f in a.found}
        assert b.counters["nodes"] == a.counters["nodes"] > 0


def test_a_bundle_past_its_seconds_returns_a_prefix() -> None:
    plan = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], BUDGET)
    payload = plan.fragments[0].payload
    (root,) = search_task(payload, ((),), BUDGET)
    paths = root.frontier[:4]
    assert len(search_task(payload, paths, BUDGET, 3600.0)) == len(paths)  # time left: every path
    (first,) = search_task(payload, paths, BUDGET, 0.0)  # none left after the first: it alone
    assert first.path == paths[0]
    assert first.frontier == search_task(payload, paths[:1], BUDGET)[0].frontier


def test_bundles_hold_at_most_their_seconds_of_expected_work() -> None:
    paths = [(1, 2, i) for i in range(10)] + [(1, i) for i in range(3)]
    tiny = {3: BUNDLE_SECONDS / 100, 2: 2 * BUNDLE_SECONDS}
    split = bundles(paths, MAX_BUNDLE, tiny.get)
    assert [list(r) for r in split] == [list(range(10)), [10], [11], [12]]  # a long path goes alone
    assert [len(r) for r in bundles(paths[:10], 4, tiny.get)] == [4, 4, 2]  # never past the size
    assert [len(r) for r in bundles(paths, 5, lambda depth: None)] == [5, 5, 3]  # no mean yet: the size rule
    third = {3: BUNDLE_SECONDS / 3.5}
    assert [len(r) for r in bundles(paths[:10], MAX_BUNDLE, third.get)] == [3, 3, 3, 1]


def test_a_bundle_grows_with_the_work_queued_per_worker_thread() -> None:
    assert bundle_seconds(0.0, 2) == BUNDLE_SECONDS  # little queued: the floor
    assert bundle_seconds(BUNDLE_SHARE * 2 * 1.5, 2) == 1.5  # 1/BUNDLE_SHARE of each thread's queue
    assert bundle_seconds(800.0, 2) == MAX_BUNDLE_SECONDS  # lora's queue on 2 workers: the cap
    assert bundle_seconds(800.0, 256) == BUNDLE_SECONDS  # the same queue over 256 workers: the floor
    assert queued_seconds({2: 10, 5: 30}, {2: 1.0, 5: 0.1}, 4) == pytest.approx((10 + 3) * 36 / 40)
    assert queued_seconds({2: 10, 5: 30}, {2: 1.0}, 4) == pytest.approx(10 * 36 / 40)  # 5: no mean yet
    assert queued_seconds({2: 3}, {2: 1.0}, 4) == 0.0  # every row held by a worker thread
    paths = [(1, 2, i) for i in range(10)]
    eighth = {3: BUNDLE_SECONDS / 8}
    assert [len(r) for r in bundles(paths, MAX_BUNDLE, eighth.get, 4 * BUNDLE_SECONDS)] == [10]
    assert [len(r) for r in bundles(paths, MAX_BUNDLE, eighth.get)] == [8, 2]  # the floor by default
    assert [len(r) for r in bundles(paths, MAX_BUNDLE, eighth.get, BUNDLE_SECONDS / 2)] == [4, 4, 2]


def test_depth_times_keep_a_moving_mean_and_a_recent_median() -> None:
    times = DepthTimes()
    assert times.median(3) is None and times.means.get(3) is None
    for s in (0.01, 0.01, 0.02, 9.0):  # one long subtree among small ones
        times.observe(3, s)
    assert times.means[3] == pytest.approx(9.04 / 4)
    assert times.median(3) == 0.02
    for _ in range(40):
        times.observe(3, 1.0)
    assert times.median(3) == 1.0  # only the last DEPTH_WINDOW count


def test_small_paths_of_every_depth_travel_together() -> None:
    times = DepthTimes()
    for depth, seconds in ((2, 1.0), (5, 0.01), (6, 0.01), (7, 0.02)):
        for _ in range(5):
            times.observe(depth, seconds)
    times.observe(5, 1.0)  # a long one: depth 5's mean rises, its median stays small
    # a budgeted task's frontier: siblings at depth 2, then one run each at depths 5, 6 and 7
    paths = [(0, 1), (0, 2), (0, 1, 2, 3, 4), (0, 1, 2, 3, 4, 5), (0, 1, 2, 3, 4, 5, 6)]
    slots = 256  # many workers: few paths wait, so the count rule alone would send each path alone
    queued = {2: 2, 5: 1, 6: 1, 7: 1}
    plan = plan_bundles(paths, queued, times, slots)
    assert plan.seconds == BUNDLE_SECONDS
    assert (times.median(5) or 1.0) <= plan.seconds / SMALL_SHARE < times.means[5]
    assert sorted(plan.tasks) == sorted([(-2, (0,)), (-2, (1,)), (-5, (2, 3, 4))])
    by_depth = plan_bundles(paths, queued, times, slots, BundleRule(small_share=None))
    assert sorted(by_depth.tasks) == sorted([(-2, (0,)), (-2, (1,)), (-5, (2,)), (-6, (3,)), (-7, (4,))])
    # many paths wait for each worker thread: paths of depths with no finished task travel together too
    fresh = DepthTimes()
    deep = [(0, 1, 2), (0, 1, 2, 3), (0, 1, 2, 3, 4)]
    assert plan_bundles(deep, {3: 100, 4: 100, 5: 100}, fresh, 2).tasks == ((-3, (0, 1, 2)),)
    few = plan_bundles(deep, {3: 1, 4: 1, 5: 1}, fresh, 2)  # few wait: each depth on its own
    assert sorted(few.tasks) == [(-5, (2,)), (-4, (1,)), (-3, (0,))]
    # the root's children on 2 workers: no depth-1 task has finished, yet they are not all one bundle
    # (one worker thread would run them while the other waited for the hand-back)
    level = [(i,) for i in range(52)]
    first = plan_bundles(level, {1: 52}, fresh, 2)
    size = bundle_size(52 - 2, 2)
    assert size > 1
    assert [len(m) for _, m in first.tasks] == [size] * (52 // size) + [52 % size] * (52 % size > 0)
    # every path exactly once, whatever the rule
    for p, batch in ((plan, paths), (by_depth, paths), (first, level)):
        assert sorted(i for _, m in p.tasks for i in m) == list(range(len(batch)))


def test_shallower_paths_run_first_and_warm_ups_last() -> None:
    assert search_priority(()) > search_priority((4,)) > search_priority((4, 1, 7))
    assert search_priority((0,) * 1000) > WARM_PRIORITY


def test_bundles_form_only_when_paths_wait_many_times_over() -> None:
    assert bundle_size(0, 8) == 1
    assert bundle_size(BUNDLE_SLACK * 8 - 1, 8) == 1  # fewer than 4 waiting per worker thread: one each
    assert bundle_size(2 * BUNDLE_SLACK * 8, 8) == 2
    assert bundle_size(10_000, 8) == MAX_BUNDLE
    assert bundle_size(1_000, 256) == 1  # 1,000 waiting paths are under 4 per thread of 256 workers


def test_keys_of_a_path_and_of_bundles() -> None:
    fp = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], BUDGET).fragments[0]
    assert bundle_key(fp, [(1, 2)]) == task_key(fp, (1, 2))
    keys = {bundle_key(fp, [(1,), (2,)]), bundle_key(fp, [(1,), (3,)]), bundle_key(fp, [(1,)])}
    assert len(keys) == 3 and all(k.startswith(f"search-{fp.spec.name}-") for k in keys)


def test_the_driver_waits_for_a_longer_batch_only_while_the_queue_covers_the_wait() -> None:
    assert linger_seconds(0, 0.1, 2) == 0.0  # nothing queued behind the running tasks: handle at once
    assert linger_seconds(-3, 0.1, 2) == 0.0  # fewer tasks than worker threads
    assert linger_seconds(50, 0.0, 2) == 0.0  # no task finished yet, so no mean to go by
    # 4 queued tasks of 0.1 s over 2 threads are 0.2 s of work: a wait it covers LINGER_COVER times
    assert linger_seconds(4, 0.1, 2) == pytest.approx(0.2 / LINGER_COVER)
    assert linger_seconds(10_000, 0.1, 2) == LINGER_SECONDS  # capped however deep the queue
    assert linger_seconds(40, 0.1, 256) < linger_seconds(40, 0.1, 2)  # the same queue lasts many workers less
    # bundles of 8 s (2 workers, a deep queue): a wait of up to 2 s, still only as the queue covers it
    assert linger_seconds(10_000, 0.1, 2, 8.0) == 8.0 / LINGER_SHARE
    assert linger_seconds(10_000, 0.1, 2, 1.0) == LINGER_SECONDS
    assert linger_seconds(40, 0.1, 2, 8.0) == pytest.approx(40 * 0.1 / 2 / LINGER_COVER)


def test_ranked_paths_run_least_straying_first_in_bundles_of_like_rank() -> None:
    """With ranks, a task's priority is its best path's; a depth's paths go to bundles best first,
    and every path still goes exactly once."""
    fresh = DepthTimes()
    level = [(i,) for i in range(12)]
    ranks = [7, 0, 3, 11, 1, 5, 2, 9, 4, 10, 6, 8]
    plan = plan_bundles(level, {1: 100}, fresh, 2, priorities=[rank_priority(r) for r in ranks])
    members = [i for _, m in plan.tasks for i in m]
    assert sorted(members) == list(range(12))
    assert [ranks[i] for i in members] == sorted(ranks)  # best first, within and across bundles
    for priority, m in plan.tasks:
        assert priority == max(rank_priority(ranks[i]) for i in m) == rank_priority(ranks[m[0]])
    unranked = plan_bundles(level, {1: 100}, fresh, 2)
    assert [i for _, m in unranked.tasks for i in m] == list(range(12))  # the batch's order
    assert rank_priority(0) > rank_priority(3) > rank_priority(10**9) > WARM_PRIORITY
