"""The report's best-so-far curve: per fragment, the speedup of the best ranked μGraph found by each
progress sample, over the reference's estimated time."""

from __future__ import annotations

from typing import Any

import pytest

from mugraph.dashboards.summary import best_so_far


def _row(digest: str, seconds: float, reference: bool = False) -> dict[str, Any]:
    return {"digest": digest, "estimated_seconds": seconds, "reference": reference}


def _sample(elapsed: float, found: dict[str, int]) -> dict[str, Any]:
    return {"elapsed": elapsed, "fragments": {name: {"mugraphs": n} for name, n in found.items()}}


def test_best_so_far_follows_the_found_order_and_never_falls() -> None:
    ranking = [_row("c", 1.0), _row("a", 2.0), _row("ref", 4.0, reference=True), _row("b", 8.0)]
    samples = [
        _sample(0.0, {"f0": 0}),
        _sample(1.0, {"f0": 1}),
        _sample(2.0, {"f0": 2, "f1": 5}),
        _sample(3.0, {"f0": 2}),
        _sample(4.0, {"f0": 4}),
    ]
    # found in the order b, a, unranked, c: speedup 0.5 (b), then 2 (a), then 4 (c)
    curve = best_so_far(samples, "f0", ["b", "a", "x", "c"], ranking)
    assert [x for x, _ in curve] == [1.0, 2.0, 3.0, 4.0]
    assert [y for _, y in curve] == pytest.approx([0.5, 2.0, 2.0, 4.0])
    assert [y for _, y in curve] == sorted(y for _, y in curve)


def test_best_so_far_needs_a_reference_and_a_ranked_mugraph() -> None:
    samples = [_sample(1.0, {"f0": 1})]
    assert best_so_far(samples, "f0", ["a"], [_row("a", 1.0)]) == []  # no reference row: no speedup
    assert best_so_far(samples, "f0", ["x"], [_row("ref", 1.0, reference=True)]) == []
    assert best_so_far(samples, "other", ["a"], [_row("a", 1.0), _row("ref", 2.0, reference=True)]) == []
