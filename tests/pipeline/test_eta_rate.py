"""The ETA's rate: states per second since the invocation's first states, so the start of a run
(workers starting, the first task drawing its inputs) does not make a short run's first ETA many
times its length."""

from __future__ import annotations

from mugraph.dashboards.console import size_text
from mugraph.dashboards.summary import eta_rate
from mugraph.pipeline.progress import RunProgress
from mugraph.pipeline.records import SearchTaskResult


def _result(states: int) -> SearchTaskResult:
    return SearchTaskResult(path=(), found=(), frontier=(), counters={"nodes": states, "seconds": 0.1})


def _event(p: RunProgress, seconds: float) -> dict[str, object]:
    return dict(p.event(seconds, 1, {"f0": 1}, {"f0": 3}, {}, {}))


def test_the_eta_rate_leaves_out_the_time_before_the_first_states() -> None:
    p = RunProgress(["f0"], [], [])
    assert _event(p, 0.5)["states_per_s_searching"] is None  # nothing searched yet
    p.on_search(0, _result(600))
    first = _event(p, 1.0)  # a second of start-up, 600 states: the average says 600/s
    assert first["states_per_s"] == 600.0 and first["states_per_s_searching"] is None
    p.on_search(0, _result(20_000))
    later = _event(p, 2.0)
    assert later["states_per_s"] == 10_300.0  # 20,600 states over 2 s
    assert later["states_per_s_searching"] == 20_000.0  # 20,000 states over the 1 s since the first


def test_an_eta_is_reckoned_at_the_searching_rate_and_unknown_before_it() -> None:
    sample = {"states": 20_600, "estimated_states": 1_020_600, "tasks_pending": 3, "tasks_running": 1}
    assert eta_rate({**sample, "states_per_s": 600.0, "states_per_s_searching": None}) == 0.0
    assert size_text({**sample, "states_per_s": 600.0, "states_per_s_searching": None}).endswith("ETA unknown")
    assert size_text({**sample, "states_per_s": 600.0, "states_per_s_searching": 20_000.0}).endswith("ETA 50 s")
    # a sample stored before the searching rate was kept: its average
    assert eta_rate({**sample, "states_per_s": 600.0}) == 600.0


def test_the_size_is_shown_once_enough_tasks_have_finished() -> None:
    """The root's probes alone are far off (gqa's read 31.7 k states of 50 M), so a progress event
    carries no size until ESTIMATE_AFTER_TASKS tasks finished, or nothing is pending."""
    from mugraph.pipeline.sampling import ESTIMATE_AFTER_TASKS, shown_estimate
    from mugraph.stages.search.estimate import SpaceEstimator

    est = SpaceEstimator()
    est.start([(0,)])
    est.finish((0,), 100, [(0, i) for i in range(ESTIMATE_AFTER_TASKS + 1)], [50.0] * (ESTIMATE_AFTER_TASKS + 1))
    assert est.estimate() is not None and shown_estimate(est) is None
    for i in range(ESTIMATE_AFTER_TASKS - 2):  # the root and these: one short
        est.finish((0, i), 40, [])
        assert shown_estimate(est) is None
    est.finish((0, ESTIMATE_AFTER_TASKS - 2), 40, [])
    shown = shown_estimate(est)
    assert shown is not None and shown.total == 100 + 40 * (ESTIMATE_AFTER_TASKS - 1) + 50.0 * 2
    small = SpaceEstimator()
    small.start([(0,)])
    small.finish((0,), 7, [])
    assert shown_estimate(small) is not None  # the whole space: exact, shown at once
