"""The live page's best-so-far curve, from the driver's layout events (plain LiveState, no browser)."""

from __future__ import annotations

import math

import pytest

from mugraph.dashboards.live_state import LiveState


def _progress(wall: float) -> dict[str, object]:
    return {
        "event": "progress",
        "wall": wall,
        "seconds": wall,
        "invocation": 0,
        "states": 1,
        "fragments": {"f0": {"states": 1}, "f1": {"states": 0}},
    }


def test_best_speedup_so_far_per_fragment_only_rises() -> None:
    st = LiveState()
    st.apply({"event": "start", "program": "p", "fragments": ["f0", "f1"], "invocation": 0})
    st.apply(_progress(1.0))  # nothing ranked yet: no point
    for est in (4e-6, 2e-6, 8e-6):  # speedups 1.25, 2.5, then a worse one
        st.apply(
            {"event": "layout", "fragment": "f0", "digest": "d", "estimated_seconds": est, "reference_seconds": 5e-6}
        )
        st.apply(_progress(st.rows[-1]["t"] / 1000 + 1))
    st.apply({"event": "layout", "fragment": "f1", "digest": "e", "error": "no layout"})  # no estimate: ignored
    st.apply(_progress(10.0))
    cols = st.columns(["f0_best", "f1_best", "speedup_one"])
    f0 = list(cols["f0_best"])
    assert math.isnan(f0[0]) and f0[1:] == pytest.approx([1.25, 2.5, 2.5, 2.5])
    assert all(math.isnan(v) for v in cols["f1_best"]) and set(cols["speedup_one"]) == {1.0}
