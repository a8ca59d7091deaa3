"""The paused collector's full collections: at most 2% of the time, judged by their estimated cost."""

from __future__ import annotations

import gc
import time
import weakref

import pytest

import mugraph.stages.search.collector as collector


class _Cycle:
    me: object


def _dropped_cycle() -> weakref.ref[_Cycle]:
    """A reference cycle made and dropped: garbage only a collection frees."""
    a = _Cycle()
    a.me = a
    return weakref.ref(a)


def test_a_full_collection_waits_until_its_estimated_cost_fits_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gc.isenabled()
    now = time.monotonic()
    monkeypatch.setattr(collector, "_since", now - 120.0)  # two minutes since the last one
    monkeypatch.setattr(collector, "_next_full", now - 1.0)  # and due by the clock
    monkeypatch.setattr(collector, "_per_block", 1.0)  # but estimated far past 2% of two minutes
    with collector.collector_paused():
        ref = _dropped_cycle()
    assert ref() is not None  # not collected: frozen with everything else
    assert collector._next_full > now + 100  # looked at again when the estimate fits
    assert gc.isenabled()

    monkeypatch.setattr(collector, "_next_full", time.monotonic() - 1.0)
    monkeypatch.setattr(collector, "_per_block", 1e-15)  # cheap: collected now
    with collector.collector_paused():
        pass
    assert ref() is None
    assert collector._per_block > 1e-15  # the collection was timed, per block
    assert collector._next_full >= collector._since + collector.FULL_COLLECTION_SECONDS
