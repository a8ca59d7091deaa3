"""What the rest of mugraph calls on a run store, as two protocols: `RunStoreReader` (what `status`,
`show`, the report, the kernels and the library's loaders read) and `RunStoreWriter` (what the driver
also writes). The Zarr directory store (`mugraph.storage.run.store.RunStore`) is the one production
implementation; tests run every backend through one contract suite (tests/helpers/run_contract.py).

Opening is not part of the protocol: a backend is opened by its own means (a path, an identity, a
lock), and what an open must refuse (another run's identity, a second writer) is in the contract.
The records crossing the seam are the typed ones of `task_records` and `run_records`; rankings and
free meta stay JSON objects whose fields other rooms own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from mugraph.storage.run.run_records import (
    ConfirmationRecord,
    ExpertRecord,
    FinalRecord,
    FragmentRecord,
    JsonObject,
    LayoutRecord,
    MeasurementRecord,
    ProgressSample,
)
from mugraph.storage.run.task_records import FoundRecord, TaskCompletion, TaskRecord, TaskSummary

__all__ = ["RunStoreReader", "RunStoreWriter"]


@runtime_checkable
class RunStoreReader(Protocol):
    """A run's records as its readers see them. Every list comes in a fixed order (tasks by row,
    timeline by invocation), so two reads of one store give equal answers."""

    path: Path  # where the store is (named in messages and reports)
    identity: dict[str, str]  # what the run was opened for (program, config, budget, schemas)
    meta: JsonObject  # free metadata (argv, versions), never compared

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def fragments(self) -> list[FragmentRecord]: ...

    def tasks(self) -> list[TaskRecord]: ...

    def pending(self) -> list[TaskRecord]: ...

    def task_summary(self) -> TaskSummary: ...

    def found(self, fragment: int) -> dict[str, FoundRecord]: ...

    def confirmations(self, fragment: int) -> dict[str, ConfirmationRecord]: ...

    def layouts(self, fragment: int) -> dict[str, LayoutRecord]: ...

    def measurements(self, fragment: int) -> dict[str, MeasurementRecord]: ...

    def ranking(self, fragment: int) -> list[JsonObject] | None: ...

    def timeline(self) -> list[list[ProgressSample]]: ...

    def final(self) -> FinalRecord | None: ...

    def experts(self) -> list[ExpertRecord] | None:
        """The program's experts as the run recorded them; None for a store made before it did."""
        ...

    def size_bytes(self) -> int:
        """The bytes the store holds on its medium (what a finished store read back reports)."""
        ...

    def writer(self) -> int | None:
        """The pid of the process that has the store open for writing now (a run going on), if any."""
        ...


@runtime_checkable
class RunStoreWriter(RunStoreReader, Protocol):
    """A run store open for its single writer, the driver.

    `complete_tasks` is the one write whose order matters: a task reads as done only once its found
    μGraphs and children are stored, and a found μGraph already stored keeps its smaller path and its
    first find time."""

    created: bool  # made by this open (False: a resumed run)

    def set_fragments(self, fragments: Sequence[FragmentRecord]) -> None: ...

    def add_tasks(self, items: Sequence[tuple[int, tuple[int, ...], int]]) -> list[int]: ...

    def complete_tasks(self, items: Sequence[TaskCompletion]) -> list[list[int]]: ...

    def put_confirmation(self, fragment: int, digest: str, result: ConfirmationRecord) -> None: ...

    def put_layout(self, fragment: int, digest: str, layout: LayoutRecord) -> None: ...

    def put_measurement(self, fragment: int, digest: str, measurement: MeasurementRecord) -> None: ...

    def put_ranking(self, fragment: int, ranking: Sequence[Mapping[str, Any]]) -> None: ...

    def put_timeline(self, invocation: int, samples: Sequence[Mapping[str, Any]]) -> None: ...

    def put_final(self, final: Mapping[str, Any]) -> None: ...

    def put_experts(self, experts: Sequence[ExpertRecord]) -> None: ...
