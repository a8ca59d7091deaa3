"""Finding every damaged record of a run store, for `repair`: the readers stop at the first, `repair`
must know them all to keep the rest.

Each record is read and checked exactly as its reader reads it (the same functions: `read_record`,
`found_record` and `check_graph_digest`, `RecordFiles.keyed_result` and the record checks,
`ResultRecords.ranking_rows`, `timeline_samples`, `final_record` and `experts_record`), and a StoreDamaged is
collected instead of raised. The root, the fragments and the task table are what every other
record is checked against, so damage there is `Unrepairable`: nothing is guessed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mugraph.storage.run.atomic_store import AtomicLocalStore
from mugraph.storage.run.cross_checks import check_final_shape, ranked_digests
from mugraph.storage.run.errors import MISMATCH_HINT, StoreDamaged, StoreError
from mugraph.storage.run.found_records import check_graph_digest, found_record, graph_digest
from mugraph.storage.run.ledger import LEDGER_NAME, Ledger, parse_lines
from mugraph.storage.run.record_checks import check_confirmation, check_fragments, check_layout, check_measurement
from mugraph.storage.run.record_files import RecordFiles, run_sync
from mugraph.storage.run.records import check_run_tag, metadata_file, read_record, record_names, run_tag
from mugraph.storage.run.result_records import ResultRecords
from mugraph.storage.run.root import RootAttrs, read_root
from mugraph.storage.run.run_records import FinalRecord, FragmentRecord, JsonObject
from mugraph.storage.run.task_records import FoundRecord
from mugraph.storage.run.task_table import TaskTable
from mugraph.storage.run.task_table_load import load_task_table
from mugraph.storage.safe_files import LinkFound, read_nofollow

__all__ = ["KEYED", "Damage", "Scan", "Unrepairable", "scan_store"]

KEYED = ("confirmations", "layouts", "measurements")  # records named by the digest of their μGraph
_CHECKS: dict[str, Callable[[Any, Path], Any]] = {
    "confirmations": check_confirmation,
    "layouts": check_layout,
    "measurements": check_measurement,
}


class Unrepairable(StoreError):
    """Damage to what the other records are checked against (root, fragments, task table): starting
    over is the way."""


def unrepairable(exc: StoreDamaged) -> Unrepairable:
    where = f"{exc.file}: " if exc.file is not None else ""
    return Unrepairable(
        f"run store damaged: {where}{exc.detail}; the root, the fragments and the task table are what every "
        f"other record is checked against, so `repair` cannot mend them: {MISMATCH_HINT}"
    )


@dataclass(frozen=True)
class Damage:
    """A damaged record: its path in the store (`found/0/<digest>`, `ledger.jsonl`), its file, the problem."""

    record: str
    file: Path
    problem: str

    def line(self) -> str:
        return f"damaged: {self.file}: {self.problem}"


@dataclass
class Scan:
    """What a store holds, its damaged records apart from its intact ones."""

    root: Path
    tag: str
    attrs: RootAttrs
    fragments: list[FragmentRecord]
    table: TaskTable
    ledger: list[str] | None  # the committed records in the ledger's order; None: the ledger is damaged
    damage: list[Damage] = field(default_factory=list)
    found: dict[int, dict[str, FoundRecord]] = field(default_factory=dict)  # intact, per fragment
    keyed: dict[str, dict[int, set[str]]] = field(default_factory=dict)  # kind → fragment → intact digests
    rankings: dict[int, list[JsonObject]] = field(default_factory=dict)  # intact, per fragment
    final: FinalRecord | None = None  # intact, or None
    experts: bool = False  # whether an intact experts record is kept
    timeline: list[str] = field(default_factory=list)  # names of the intact timeline records
    has_fragments_record: bool = False

    @property
    def damaged(self) -> set[str]:
        return {d.record for d in self.damage}


class _Reader(ResultRecords):
    """The checks of the records written whole, over a store whose fragments were read here."""

    def __init__(self, root: Path, tag: str, files: RecordFiles, fragments: list[FragmentRecord]) -> None:
        empty = Ledger(root, set(), durable=False)
        super().__init__(root, readonly=True, tag=tag, store=files.store, files=files, ledger=empty)
        self.files = files
        self._fragments = fragments


def scan_store(root: Path) -> Scan:
    """Every damaged record of the store at `root` (its writer's lock held by the caller); Unrepairable
    for damage to the root, the fragments or the task table, StoreError where it is no run store."""
    if not root.is_dir():
        raise StoreError(f"no run store at {root}")
    try:
        attrs = read_root(root)
        tag = run_tag(attrs["identity"])
        store = AtomicLocalStore(root, read_only=True, seal_key=attrs["store"])
        ledger, ledger_damage = _read_ledger(root)
        fragments, present = _read_fragments(root, store, tag, ledger)
        table = run_sync(load_task_table(store, root, len(fragments), exclusive=True, run=tag))
    except StoreDamaged as exc:
        raise unrepairable(exc) from None
    if not present and table.rows:
        raise Unrepairable(
            f"run store damaged: {metadata_file(root, 'fragments')}: missing, though the task table has "
            f"{table.rows} rows; `repair` cannot mend it: {MISMATCH_HINT}"
        )
    scan = Scan(root, tag, attrs, fragments, table, ledger, has_fragments_record=present)
    if ledger_damage is not None:
        scan.damage.append(ledger_damage)
    _check_records(scan, store)
    _check_committed(scan)
    return scan


def _read_ledger(root: Path) -> tuple[list[str] | None, Damage | None]:
    """The ledger's records in order, or None and the damage (a torn last line is a crash's, not damage)."""
    file = root / LEDGER_NAME
    try:
        complete = read_nofollow(file).rpartition(b"\n")[0]
        return parse_lines(complete, file), None
    except FileNotFoundError:
        return None, Damage(LEDGER_NAME, file, "missing (it lists what the run has committed)")
    except StoreDamaged as exc:
        return None, Damage(LEDGER_NAME, file, exc.detail)
    except (LinkFound, OSError) as exc:
        return None, Damage(LEDGER_NAME, file, str(exc))


def _read_fragments(
    root: Path, store: AtomicLocalStore, tag: str, ledger: list[str] | None
) -> tuple[list[FragmentRecord], bool]:
    """The fragments, checked as the store's open checks them and every reference graph hashed (a
    ranking is checked against it); StoreDamaged for a bad or missing committed record."""
    file = metadata_file(root, "fragments")
    attrs = run_sync(read_record(store, root, "fragments"))
    if attrs is None:
        if ledger is not None and "fragments" in ledger:
            raise StoreDamaged(f"{file}: missing", file, "missing, though the run committed it")
        return [], False
    check_run_tag(attrs, tag, file)
    fragments = check_fragments(attrs.get("fragments"), file)
    for f in fragments:
        graph_digest(f["graph"], file)
    return fragments, True


def _record_paths(scan: Scan) -> list[str]:
    """Every record of the kinds `repair` may drop, as listed on disk."""
    root, n = scan.root, len(scan.fragments)
    paths = [f"found/{i}/{d}" for i in range(n) for d in record_names(root, f"found/{i}")]
    paths += [f"{kind}/{i}/{d}" for kind in KEYED for i in range(n) for d in record_names(root, f"{kind}/{i}")]
    paths += [f"rankings/{i}" for i in range(n) if metadata_file(root, f"rankings/{i}").is_file()]
    paths += [f"timeline/{name}" for name in record_names(root, "timeline")]
    return paths + [r for r in ("final", "experts") if metadata_file(root, r).is_file()]


def _check_records(scan: Scan, store: AtomicLocalStore) -> None:
    """Read every record at once and check each alone, collecting the damaged ones."""
    paths = _record_paths(scan)

    async def read_all() -> list[JsonObject | BaseException | None]:
        return await asyncio.gather(*(read_record(store, scan.root, p) for p in paths), return_exceptions=True)

    reader = _Reader(scan.root, scan.tag, RecordFiles(store, scan.root), scan.fragments)
    scan.keyed = {kind: {i: set() for i in range(len(scan.fragments))} for kind in KEYED}
    for path, got in zip(paths, run_sync(read_all()), strict=True):
        try:
            if isinstance(got, BaseException):
                raise got
            if got is None:
                raise StoreDamaged("missing", metadata_file(scan.root, path), "missing (removed while being read)")
            _check_one(scan, reader, path, got)
        except StoreDamaged as exc:
            scan.damage.append(Damage(path, exc.file or metadata_file(scan.root, path), exc.detail))


def _check_one(scan: Scan, reader: _Reader, path: str, attrs: Mapping[str, Any]) -> None:
    """Check one record as its reader does and keep it as intact (StoreDamaged otherwise)."""
    parts = path.split("/")
    kind, file = parts[0], metadata_file(scan.root, path)
    if kind == "found":
        i, d = int(parts[1]), parts[2]
        rec = found_record(i, d, attrs, file, scan.table.rows, readonly=False)
        check_graph_digest(rec.graph, d, file)
        scan.found.setdefault(i, {})[d] = rec
    elif kind in KEYED:
        i, d = int(parts[1]), parts[2]
        result, _ = reader.files.keyed_result(f"{kind}/{i}", d, attrs)
        _CHECKS[kind](result, file)
        scan.keyed[kind][i].add(d)
    elif kind == "rankings":
        rows = reader.ranking_rows(int(parts[1]), attrs)
        ranked_digests(rows, file)  # as the store's open checks them
        scan.rankings[int(parts[1])] = rows
    elif kind == "timeline":
        reader.timeline_samples(parts[1], attrs)
        scan.timeline.append(parts[1])
    elif kind == "experts":
        reader.experts_record(attrs)
        scan.experts = True
    else:
        final = reader.final_record(attrs)
        check_final_shape(final, file)
        scan.final = final


def _check_committed(scan: Scan) -> None:
    """Each record the ledger names that is gone is damage; one of a kind `repair` cannot drop is
    Unrepairable."""
    for record in scan.ledger or []:
        file = metadata_file(scan.root, record)
        if file.is_file():
            continue
        kind = record.split("/")[0]
        if kind not in ("found", *KEYED, "rankings", "timeline", "final", "experts") or not _in_range(scan, record):
            raise Unrepairable(
                f"run store damaged: {file}: missing, though the run committed it; `repair` does not know "
                f"this record: {MISMATCH_HINT}"
            )
        scan.damage.append(Damage(record, file, "missing, though the run committed it"))


def _in_range(scan: Scan, record: str) -> bool:
    """Whether `record` names a fragment of the store (or none)."""
    parts = record.split("/")
    if parts[0] in ("timeline", "final", "experts"):
        return len(parts) == (2 if parts[0] == "timeline" else 1)
    want = 2 if parts[0] == "rankings" else 3
    return len(parts) == want and parts[1].isdigit() and int(parts[1]) < len(scan.fragments)
