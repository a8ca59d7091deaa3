"""The driver writes its progress samples often early on and rarely late in a long invocation."""

from __future__ import annotations

import itertools

from mugraph.pipeline.sampling import (
    TIMELINE_WRITE_FIRST,
    TIMELINE_WRITE_FRACTION,
    TIMELINE_WRITE_SECONDS,
    timeline_write_interval,
)


def writes_over(seconds: int) -> list[float]:
    """The times the driver's rule writes the timeline, sampling once a second (as it does)."""
    last, out = -TIMELINE_WRITE_SECONDS, []
    for t in range(seconds + 1):
        if t - last >= timeline_write_interval(float(t)):
            out.append(float(t))
            last = t
    return out


def test_two_hours_take_a_fraction_of_the_writes_and_lose_at_most_four_percent() -> None:
    writes = writes_over(7200)
    assert writes[0] == 0.0  # an invocation killed at once is in the timeline
    assert writes[:6] == [0.0, 5.0, 10.0, 15.0, 20.0, 27.0]  # a quarter of the time run, from 5 s
    assert writes[10:13] == [115.0, 145.0, 175.0]  # then every 30 s
    assert len(writes) < 100  # every 5 s would be 1,441 writes of the same size
    gaps = [(b - a, b) for a, b in itertools.pairwise(writes)]
    assert all(gap <= max(TIMELINE_WRITE_SECONDS, TIMELINE_WRITE_FRACTION * end) + 1 for gap, end in gaps)
    assert all(gap <= max(TIMELINE_WRITE_FIRST, end / 4) + 1 for gap, end in gaps if end <= 120)
    assert max(gap for gap, _ in gaps) <= 0.04 * 7200 + 1
    assert len(writes_over(600)) == 27  # a 10-minute run: 11 writes in its first 2 minutes, then every 30 s
