"""The ranking's rows as typed records: what `rank` computes per μGraph, and what the run store keeps
(and the report, `mugraph show` and the dashboards read) once the reference is placed and GPU
measurements applied.

They are TypedDicts, not dataclasses, because a row is stored and read back as JSON: a row read from
a store is the same dict the driver wrote. No `from __future__ import annotations` here: TypedDict
needs `NotRequired` unquoted to tell required keys from optional ones at run time.
"""

from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, cast

from mugraph.stages.layout.costs import LayoutsJSON
from mugraph.stages.layout.roofline import RooflineTotals


class RankRow(RooflineTotals):
    """One μGraph's estimate: the roofline's totals under its layouts (the fields it inherits; its
    `estimated_seconds` is the emitted kernels' estimate, the roofline's is `roofline_seconds`), the
    emitted kernels' terms (`emitted_*`, the estimate ranked by), the layout cost, and the speedup
    over the reference."""

    digest: str
    roofline_seconds: float
    roofline_model: str
    # the cost model's terms (cost_model.CostTerms, but for estimated_seconds), named emitted_* since the
    # emitted model was the first
    emitted_model: str
    emitted_launches: int
    emitted_launch_seconds: float
    emitted_serial_seconds: float
    emitted_dram_seconds: float
    emitted_waves: int
    emitted_iterations: int
    emitted_resident: int
    emitted_spill_bytes: int
    emitted_registers: int
    speedup: float
    layout_cost: int
    layout_terms: dict[str, int]
    layouts: LayoutsJSON
    profile: str
    model: str
    # set by mark_near_ties on a row whose estimate is within the model's error of the next one's
    near_tie: NotRequired[str]
    tie_break: NotRequired[str]
    tie_values: NotRequired[list[float | str]]  # the two rows' values of `tie_break`


class RankedRow(RankRow):
    """A stored row: placed against the reference (`reference`, `confident`) and, where a GPU timed
    it, its measurement (or why the measurement failed)."""

    reference: bool
    confident: bool
    measured_seconds: NotRequired[float]
    measured_device: NotRequired[str | None]
    measured_speedup: NotRequired[float | None]
    measure_error: NotRequired[str]


def ranked_rows(stored: Sequence[Mapping[str, Any]]) -> list[RankedRow]:
    """A ranking read back from JSON (the run store, a report) as the rows it was written as."""
    return cast(list[RankedRow], list(stored))
