"""When a run found its μGraphs: read from the find times the driver stores with each found record
(run seconds and states explored at the commit of the find), against the final ranking.

For `mugraph status` (where in the run the best μGraph came), the report's best-so-far curve, and a
benchmark's question "how good was the best found by 10% of the run" (`best_at`). Stores written
before find times were kept have none; every function here then says so (None) rather than guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypedDict

from mugraph.dashboards.summary import reference_row, row_seconds
from mugraph.storage.run.protocol import RunStoreReader

__all__ = ["BestAt", "Find", "best_at", "best_found", "find_line", "run_seconds"]


class Find(Protocol):
    """A found μGraph with its find time (`storage.run.task_records.FoundRecord`)."""

    @property
    def digest(self) -> str: ...

    @property
    def seconds(self) -> float | None: ...

    @property
    def states(self) -> int | None: ...


class BestAt(TypedDict):
    """The best μGraph a run had found by `fraction` of its run time (`best_at`)."""

    fraction: float
    seconds: float  # fraction × the run's seconds: the cut
    run_seconds: float  # the whole run's seconds across its invocations (`run_seconds`; at least its last find's)
    digest: str | None  # the best ranked μGraph found by the cut (None: none yet)
    speedup: float | None  # its speedup over the reference (None: none found yet)
    found_seconds: float | None  # when it was found
    found_states: int | None  # the states the run had explored then
    best_speedup: float  # the best speedup of every μGraph the run ranked (the whole run's answer)
    timing: str  # what the speedups compare: "estimated on <profile>" or "measured on <device>"


def run_seconds(timeline: Sequence[Sequence[Mapping[str, Any]]]) -> float:
    """The run's seconds across its invocations, as its progress samples count them (each
    invocation's last sample; the gaps between invocations left out)."""
    return sum(float(inv[-1]["seconds"]) for inv in timeline if inv)


def _speedups(ranking: Sequence[Mapping[str, Any]]) -> tuple[dict[str, float], str] | None:
    """Each ranked μGraph's speedup over the reference, and what the times are; None without a
    reference row."""
    ref = reference_row(ranking)
    if ref is None:
        return None
    t_ref, timing = row_seconds(ref[1])
    out = {}
    for r in ranking:
        t = row_seconds(r)[0]
        if not r.get("reference") and t > 0:
            out[str(r["digest"])] = t_ref / t
    return out, timing


def best_found(found: Mapping[str, Find], ranking: Sequence[Mapping[str, Any]]) -> tuple[str, float] | None:
    """(digest, speedup) of the fastest ranked μGraph of `found` (the first in ranking order among
    equals); None when none is ranked or the ranking has no reference."""
    speed = _speedups(ranking)
    return None if speed is None else _fastest(found, ranking, speed[0])


def _fastest(
    found: Mapping[str, Find], ranking: Sequence[Mapping[str, Any]], speed: Mapping[str, float]
) -> tuple[str, float] | None:
    """`best_found` with the ranking's speedups already had."""
    ranked = [(-speed[d], n, d) for n, d in enumerate(r["digest"] for r in ranking) if d in speed and d in found]
    if not ranked:
        return None
    _, _, digest = min(ranked)
    return digest, speed[digest]


def find_line(found: Mapping[str, Find], ranking: Sequence[Mapping[str, Any]], total_seconds: float) -> str | None:
    """`best first found after 41.3 s of search (1,204,332 states; 12% of the run's search time)`: when
    the run first held a μGraph as fast as a fragment's fastest ranked one (of tied μGraphs, the one
    found first, as the best-so-far curve has it); `fastest μGraph ...` where the ranking keeps the
    reference first. None where there is none or it has no find time."""
    speed = _speedups(ranking)
    best = None if speed is None else _fastest(found, ranking, speed[0])
    if speed is None or best is None:
        return None
    equal = [r for d, r in found.items() if speed[0].get(d, 0.0) >= best[1] * (1 - 1e-9)]
    if any(r.seconds is None or r.states is None for r in equal):
        return None
    first = min(equal, key=lambda r: (r.seconds or 0.0, r.states or 0))
    seconds, states = first.seconds or 0.0, first.states or 0
    share = f"{100 * min(1.0, seconds / total_seconds):.0f}%" if total_seconds > 0 else "0%"
    # a ranking that keeps the reference first says "best the reference program": the find is then of
    # the fastest μGraph, also where the search found the reference's own graph
    top = ranking[0] if ranking else {}
    what = "best" if top.get("digest") == best[0] and not top.get("reference") else "fastest μGraph"
    return f"{what} first found after {seconds:.1f} s of search ({states:,} states; {share} of the run's search time)"


def best_at(store: RunStoreReader, fragment: int | str, fraction: float) -> BestAt | None:
    """The best μGraph of `fragment` (its index or name) that the run in `store` had found by
    `fraction` (0 to 1) of its run time, scored by the final ranking (the model's estimate, or the
    GPU's time where the run measured), beside the best of every μGraph ranked. None where the
    fragment has no ranking yet or its finds have no find times (a store from before they were kept)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction {fraction!r} is not between 0 and 1")
    names = [f["name"] for f in store.fragments()]
    index = names.index(fragment) if isinstance(fragment, str) and fragment in names else fragment
    if not isinstance(index, int) or not 0 <= index < len(names):
        raise ValueError(f"no fragment {fragment!r} in {store.path} (it has {', '.join(names) or 'none'})")
    ranking = store.ranking(index)
    speed = _speedups(ranking or [])
    found = store.found(index)
    if speed is None or not speed[0] or any(r.seconds is None for r in found.values()):
        return None
    speedups, timing = speed
    total = max([run_seconds(store.timeline()), *(r.seconds or 0.0 for r in found.values())])
    cut = fraction * total
    by_then = {d: r for d, r in found.items() if r.seconds is not None and r.seconds <= cut}
    best = best_found(by_then, ranking or [])
    rec = by_then[best[0]] if best is not None else None
    return {
        "fraction": fraction,
        "seconds": cut,
        "run_seconds": total,
        "digest": best[0] if best is not None else None,
        "speedup": best[1] if best is not None else None,
        "found_seconds": rec.seconds if rec is not None else None,
        "found_states": rec.states if rec is not None else None,
        "best_speedup": max(speedups.values()),
        "timing": timing,
    }
