"""The one question the ranking asks a cost model, as a small interface.

A cost model answers: how long does this kernel graph take, under this layout choice, on this GPU
profile, and why (the breakdown a ranking row keeps, so a table can say why one μGraph beats
another). The ranking, rerank and the reference's price take a `CostModel` rather than calling one
model's functions, so a second model (a measured table, a learned one, a trivial one in a test) is
passed in, not wired in; today's is `emitted.EmittedModel` ("emitted-v2").

A new term of the breakdown is a field of `CostTerms` that the model fills (and, since stored rows
keep the terms flat, a `emitted_*` field of `rows.RankRow`: a test checks the two agree).
"""

from __future__ import annotations

from typing import Protocol, TypedDict

from mugraph.ir.graph import KernelGraph
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.profiles import GpuProfile


class CostTerms(TypedDict):
    """An estimate's sums (its `emitted_*` columns of a ranking row): the model that made it, the
    estimated time, launches, the serial and DRAM time of the kernels each bounds, the most rounds of
    resident programs, for-loop iterations, the fewest resident programs, spilled bytes and the most
    registers per thread."""

    model: str
    estimated_seconds: float
    launches: int
    launch_seconds: float
    serial_seconds: float
    dram_seconds: float
    waves: int
    iterations: int
    resident: int
    spill_bytes: int
    registers: int


class CostModel(Protocol):
    """A model of a kernel graph's run time. `name` is its name and version, kept on every record it
    priced, so a store ranked by another model is not read as this one's."""

    @property
    def name(self) -> str: ...

    def predict(self, graph: KernelGraph, layouts: Layouts | None, profile: GpuProfile) -> CostTerms:
        """The estimate and its breakdown (`layouts` None: the layouts codegen uses by default)."""
        ...

    def price(self, graph: KernelGraph, layouts: Layouts | None, profile: GpuProfile) -> float:
        """The estimated seconds alone (`predict(...)["estimated_seconds"]`, perhaps cheaper)."""
        ...
