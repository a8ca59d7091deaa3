"""The later stages' records in a run store, each one sealed JSON record written whole: a μGraph's
confirmation, layout and GPU measurement (named by its digest), a fragment's ranking, an
invocation's progress timeline, the final result and the program's experts, with the guards every write of the store
passes. `ResultRecords` is the base of `store.RunStore`, which adds opening, the fragments, the task
table and the found μGraphs: those writes follow an order a crash must not break, these need none
beyond the ledger, so they live apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from mugraph.ir.names import check_label
from mugraph.storage.run.atomic_store import AtomicLocalStore
from mugraph.storage.run.errors import StoreError, damaged
from mugraph.storage.run.found_records import graph_digest
from mugraph.storage.run.ledger import Ledger
from mugraph.storage.run.record_checks import (
    DIGEST,
    check_confirmation,
    check_experts,
    check_layout,
    check_measurement,
    check_samples,
)
from mugraph.storage.run.record_files import RecordFiles
from mugraph.storage.run.records import RUN_KEY, check_run_tag, metadata_file, normalize, write_record
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

__all__ = ["ResultRecords"]

_KEYED = ("confirmations", "layouts", "measurements")  # records named by the digest of their μGraph


class ResultRecords:
    """Confirmations, layouts, measurements, rankings, timeline, final and experts records of one run's store,
    and the state and guards the whole store shares (closed, read-only, broken by a failed write)."""

    def __init__(
        self, path: Path, *, readonly: bool, tag: str, store: AtomicLocalStore, files: RecordFiles, ledger: Ledger
    ) -> None:
        self.path = path
        self.readonly = readonly
        self._tag = tag
        self._store = store
        self._files = files
        self._ledger = ledger
        self._closed = False
        self._broken: str | None = None
        self._fragments: list[FragmentRecord] | None = None
        self._reference_digests: dict[int, str] = {}

    # ---------------------------------------------------------------- guards

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Guard a write: after a failed one the memory may be ahead of the disk, so refuse more."""
        self._check_writable()
        try:
            yield
        except BaseException as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            raise

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreError(f"run store {self.path} is closed")
        if self.readonly:
            raise StoreError(f"run store {self.path} is open read-only")
        if self._broken is not None:
            raise StoreError(f"run store {self.path}: an earlier write failed ({self._broken}); reopen the store")

    def _check_fragment(self, fragment: int) -> int:
        if isinstance(fragment, bool) or not isinstance(fragment, int) or fragment < 0:
            raise ValueError(f"fragment index must be a non-negative int, got {fragment!r}")
        if self._fragments is not None and fragment >= len(self._fragments):
            raise ValueError(f"fragment {fragment} does not exist (the store has {len(self._fragments)} fragments)")
        return fragment

    @staticmethod
    def _check_digest(digest: str) -> str:
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise ValueError(f"digest {digest!r} is not a plain name ([0-9A-Za-z_.-], at most 128 characters)")
        return digest

    def _check_keyed_names(self, fragments: int) -> None:
        """Each confirmation, layout and measurement names the μGraph it is about (checked on open)."""
        for i in range(fragments):
            for kind in _KEYED:
                self._files.check_keyed_names(f"{kind}/{i}")

    # ---------------------------------------------------------------- confirmations, layouts, measurements

    def put_confirmation(self, fragment: int, digest: str, result: ConfirmationRecord) -> None:
        self._put_keyed("confirmations", fragment, digest, result)

    def confirmations(self, fragment: int) -> dict[str, ConfirmationRecord]:
        return {d: check_confirmation(r, f) for d, (r, f) in self._keyed("confirmations", fragment).items()}

    def put_layout(self, fragment: int, digest: str, layout: LayoutRecord) -> None:
        """The chosen layouts of a confirmed μGraph (independent of the GPU profile)."""
        self._put_keyed("layouts", fragment, digest, layout)

    def layouts(self, fragment: int) -> dict[str, LayoutRecord]:
        return {d: check_layout(r, f) for d, (r, f) in self._keyed("layouts", fragment).items()}

    def put_measurement(self, fragment: int, digest: str, measurement: MeasurementRecord) -> None:
        """A μGraph's (or the reference's) run time measured on a GPU, which ranks before the model."""
        self._put_keyed("measurements", fragment, digest, measurement)

    def measurements(self, fragment: int) -> dict[str, MeasurementRecord]:
        return {d: check_measurement(r, f) for d, (r, f) in self._keyed("measurements", fragment).items()}

    def _put_keyed(self, kind: str, fragment: int, digest: str, result: Mapping[str, Any]) -> None:
        self._check_writable()
        path = f"{kind}/{self._check_fragment(fragment)}/{self._check_digest(digest)}"
        value = normalize(dict(result), kind[:-1])
        with self._writing():
            write_record(self._store, path, {"result": value})
            self._ledger.add([path])

    def _keyed(self, kind: str, fragment: int) -> dict[str, tuple[JsonObject, Path]]:
        return self._files.keyed(f"{kind}/{self._check_fragment(fragment)}")

    # ---------------------------------------------------------------- rankings, timeline, final

    def put_ranking(self, fragment: int, ranking: Sequence[Mapping[str, Any]]) -> None:
        self._check_writable()
        path = f"rankings/{self._check_fragment(fragment)}"
        value = normalize([dict(r) for r in ranking], "ranking")
        with self._writing():
            write_record(self._store, path, {"ranking": value, RUN_KEY: self._tag})
            self._ledger.add([path])

    def ranking(self, fragment: int) -> list[JsonObject] | None:
        """The stored ranking's rows (stages.layout.rows.RankedRow, which this room cannot import)."""
        attrs = self._files.read(f"rankings/{self._check_fragment(fragment)}")
        return None if attrs is None else self.ranking_rows(fragment, attrs)

    def ranking_rows(self, fragment: int, attrs: Mapping[str, Any]) -> list[JsonObject]:
        """The rows of fragment `fragment`'s ranking read as `attrs`, checked (StoreDamaged naming its file)."""
        path = f"rankings/{fragment}"
        check_run_tag(attrs, self._tag, metadata_file(self.path, path))
        rows = self._files.field(path, attrs, "ranking", list)
        reference = self._reference_digest(fragment)
        for row in rows:
            if isinstance(row, dict) and row.get("reference") and row.get("digest") != reference:
                raise damaged(
                    metadata_file(self.path, path),
                    f"its reference row names {str(row.get('digest'))[:16]!r}, but the reference graph of "
                    f"fragment {fragment} hashes to {reference[:16]}",
                )
        return rows

    def _reference_digest(self, fragment: int) -> str:
        """The canonical digest of a fragment's reference graph (hashed once per open)."""
        if fragment not in self._reference_digests:
            file = metadata_file(self.path, "fragments")
            if self._fragments is None:
                raise damaged(file, "missing, though a ranking names the fragments")
            self._reference_digests[fragment] = graph_digest(self._fragments[fragment]["graph"], file)
        return self._reference_digests[fragment]

    def put_timeline(self, invocation: int, samples: Sequence[Mapping[str, Any]]) -> None:
        """The progress samples of one invocation of the run (replaced as it goes on)."""
        self._check_writable()
        if not isinstance(invocation, int) or isinstance(invocation, bool) or not 0 <= invocation < 10**6:
            raise ValueError(f"invocation {invocation!r} must be an int in [0, 10**6)")
        value = normalize([dict(x) for x in samples], "timeline")
        with self._writing():
            write_record(self._store, f"timeline/{invocation:06d}", {"samples": value, RUN_KEY: self._tag})
            self._ledger.add([f"timeline/{invocation:06d}"])

    def timeline(self) -> list[list[ProgressSample]]:
        """Every invocation's progress samples, oldest invocation first (as the driver wrote them)."""
        return [self.timeline_samples(name, attrs) for name, attrs in self._files.read_all("timeline")]

    def timeline_samples(self, name: str, attrs: Mapping[str, Any] | None) -> list[ProgressSample]:
        """The samples of the timeline record `name` read as `attrs`, checked (StoreDamaged naming its file)."""
        file = metadata_file(self.path, f"timeline/{name}")
        check_run_tag(attrs or {}, self._tag, file)
        return check_samples(self._files.field(f"timeline/{name}", attrs, "samples", list), file)

    def put_final(self, final: Mapping[str, Any]) -> None:
        self._check_writable()
        value = normalize(dict(final), "final result")
        with self._writing():
            write_record(self._store, "final", {"final": value, RUN_KEY: self._tag})
            self._ledger.add(["final"])

    def final(self) -> FinalRecord | None:
        attrs = self._files.read("final")
        return None if attrs is None else self.final_record(attrs)

    def final_record(self, attrs: Mapping[str, Any]) -> FinalRecord:
        """The final record read as `attrs`, checked (StoreDamaged naming its file)."""
        check_run_tag(attrs, self._tag, metadata_file(self.path, "final"))
        return cast(FinalRecord, self._files.field("final", attrs, "final", dict))

    def put_experts(self, experts: Sequence[ExpertRecord]) -> None:
        """The program's experts, written by every invocation (its program file may name others since)."""
        self._check_writable()
        value = normalize([dict(e) for e in experts], "experts")
        for e in value:  # as the reader checks them
            check_label(e.get("label"), "expert")
            self._check_digest(e.get("digest"))
        with self._writing():
            write_record(self._store, "experts", {"experts": value, RUN_KEY: self._tag})
            self._ledger.add(["experts"])

    def experts(self) -> list[ExpertRecord] | None:
        """The program's experts in its order; None for a store made before the record was kept."""
        attrs = self._files.read("experts")
        return None if attrs is None else self.experts_record(attrs)

    def experts_record(self, attrs: Mapping[str, Any]) -> list[ExpertRecord]:
        """The experts record read as `attrs`, checked (StoreDamaged naming its file)."""
        file = metadata_file(self.path, "experts")
        check_run_tag(attrs, self._tag, file)
        return check_experts(self._files.field("experts", attrs, "experts", list), file)
