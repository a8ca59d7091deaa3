"""Repairing a damaged run store (`mugraph repair STORE`): every intact record kept, the damaged ones
dropped or rebuilt, so that the normal resume finishes the run with the result of an undamaged one.
`repair_scan` finds the damage, `repair_plan` says what to do (and why it is exact), this module
does it under the writer's lock and says what it did.

Surviving `kill -9`: the writes come in an order where every state between them is the old damage
with part of the repair done, which `repair` run again finds and completes with the same outcome:
(1) the tasks set to run again and the commit record's found counts lowered (a pending task with
committed results, and fewer records counted than kept, are both states the store allows), (2) the
emptied timeline records, (3) the ledger, replaced whole in one atomic file, (4) last, the dropped
records, each kind before the kinds it names (`DROP_ORDER`), the damaged ones among them: until the
last is gone the store still reads as damaged. Each file is replaced or removed atomically.
"""

from __future__ import annotations

import functools
import shlex
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mugraph.storage.run.atomic_store import AtomicLocalStore, remove_temp_files
from mugraph.storage.run.errors import StoreDamaged, StoreError
from mugraph.storage.run.ledger import rewrite_ledger
from mugraph.storage.run.lock import StoreLock
from mugraph.storage.run.record_files import run_sync
from mugraph.storage.run.recorded_command import made_from_python, python_call, resuming_command
from mugraph.storage.run.records import RUN_KEY, metadata_file, write_record
from mugraph.storage.run.repair_plan import RepairPlan, plan_repair
from mugraph.storage.run.repair_scan import Damage, Scan, Unrepairable, scan_store, unrepairable
from mugraph.storage.run.root import read_root
from mugraph.storage.run.store import RunStore
from mugraph.storage.run.task_table_load import load_task_table

__all__ = ["Judgement", "RepairReport", "Unrepairable", "apply_plan", "repair_steps", "repair_store"]

# A check of a scanned store beyond what its records say of themselves, made by a caller that may know
# more than storage does (whether the final record's program computes the program it was made for):
# the records it finds damaged, and notes on what it could not check.
Judgement = Callable[[Scan], tuple[list[Damage], list[str]]]

_NAMES = {  # (one, many) of each kind of record, as the summary counts them
    "found": ("found μGraph", "found μGraphs"),
    "confirmations": ("confirmation", "confirmations"),
    "layouts": ("layout", "layouts"),
    "measurements": ("measurement", "measurements"),
    "rankings": ("ranking", "rankings"),
    "final": ("the final record", "the final record"),
    "experts": ("the experts record", "the experts record"),
}


@dataclass(frozen=True)
class RepairReport:
    """What `repair` found and did (or, with `dry_run`, would do)."""

    plan: RepairPlan
    dry_run: bool
    resume: str  # the command that finishes the run
    notes: tuple[str, ...] = ()  # what the judgement could not check, and why

    def lines(self) -> list[str]:
        """One line per damaged record, the notes, then the summary."""
        return [d.line() for d in self.plan.damage] + list(self.notes) + [self.summary()]

    def summary(self) -> str:
        plan, store = self.plan, self.plan.scan.root
        if not plan.changes and self.notes:
            return f"run store {store}: no damaged record among those checked; nothing repaired (see the note)"
        if not plan.changes:
            return f"run store {store}: no damaged record; nothing to repair"
        done = "would repair" if self.dry_run else "repaired"
        parts = [_counted(plan.drop)] if plan.drop else []
        if plan.emptied:
            n = len(plan.emptied)
            parts.append(f"emptied {n} timeline record{'s' if n > 1 else ''} (progress samples of a past invocation)")
        if plan.ledger_rebuilt:
            parts.append("rebuilt the ledger from the records kept")
        if plan.rerun:
            n = len(plan.rerun)
            parts.append(f"{n} task{'s' if n > 1 else ''} set to run again")
        then = "the run's result is intact" if plan.keeps_result() else f"run `{self.resume}` to finish"
        tail = "; nothing changed (--dry-run)" if self.dry_run else ""
        return f"{done} {store}: {'; '.join(parts) or 'recounted the found μGraphs'}; {then}{tail}"

    def record(self) -> dict[str, Any]:
        """The report as `--json` prints it."""
        plan = self.plan
        return {
            "store": str(plan.scan.root),
            "dry_run": self.dry_run,
            "damaged": [{"record": d.record, "file": str(d.file), "problem": d.problem} for d in plan.damage],
            "dropped": plan.drop,
            "emptied": plan.emptied,
            "ledger_rebuilt": plan.ledger_rebuilt,
            "tasks_rerun": plan.rerun,
            "found_counts": {str(i): n for i, n in sorted(plan.counts.items())},
            "changed": plan.changes and not self.dry_run,
            "result_intact": plan.keeps_result(),
            "resume": self.resume,
            "notes": list(self.notes),
        }


def _counted(records: list[str]) -> str:
    kinds = Counter(r.split("/")[0] for r in records)
    said = []
    for kind, (one, many) in _NAMES.items():
        if kinds[kind]:
            said.append(one if one == many else f"{kinds[kind]} {one if kinds[kind] == 1 else many}")
    return "dropped " + ", ".join(said)


def repair_store(root: Path, *, dry_run: bool = False, judge: Judgement | None = None) -> RepairReport:
    """Repair the run store at `root` (with `dry_run`, only say how), with the records `judge` finds
    damaged besides. StoreBusy while a live run holds it; Unrepairable (nothing changed) where the
    root, the fragments or the task table is damaged."""
    root = Path(root)
    if not root.is_dir():
        raise StoreError(f"no run store at {root}")
    try:
        read_root(root)  # before the lock: no lock file is made in a directory that is no run store
    except StoreDamaged as exc:  # said as every unrepairable damage is: not "run mugraph repair"
        raise unrepairable(exc) from None
    lock = StoreLock.acquire(root, record=not dry_run)  # a dry run changes no file, the lock's included
    try:
        scan = scan_store(root)
        notes: list[str] = []
        if judge is not None:
            more, notes = judge(scan)
            scan.damage += [d for d in more if d.record not in scan.damaged]
        plan = plan_repair(scan)
        if plan.changes and not dry_run:
            remove_temp_files(root)
            apply_plan(plan)
            _check_clean(root)
        return RepairReport(plan, dry_run, resume_command(root, plan), tuple(notes))
    finally:
        lock.release()


def apply_plan(plan: RepairPlan) -> None:
    """Write the repair, in the order the module's docstring gives."""
    for step in repair_steps(plan):
        step()


def repair_steps(plan: RepairPlan) -> list[Callable[[], None]]:
    """The repair's writes in order, each one atomic file or a few (a kill between any two leaves a
    store that `repair` completes)."""
    scan, root = plan.scan, plan.scan.root
    store = AtomicLocalStore(root, seal_key=scan.attrs["store"])
    steps: list[Callable[[], None]] = []
    if plan.rerun or plan.counts:
        steps.append(lambda: _reopen_tasks(plan, store))
    steps += [functools.partial(write_record, store, r, {"samples": [], RUN_KEY: scan.tag}) for r in plan.emptied]
    if plan.ledger != scan.ledger:
        steps.append(functools.partial(rewrite_ledger, root, plan.ledger))
    return steps + [functools.partial(_remove, root, record) for record in plan.drop]


def _reopen_tasks(plan: RepairPlan, store: AtomicLocalStore) -> None:
    """Set the tasks to run again pending, then lower the commit record's found counts."""
    scan = plan.scan
    table = run_sync(load_task_table(store, scan.root, len(scan.fragments), exclusive=True, run=scan.tag))
    table.mark_pending(plan.rerun)
    table.found_counts.update(plan.counts)
    table.commit()


def _remove(root: Path, record: str) -> None:
    metadata_file(root, record).unlink(missing_ok=True)  # the record is gone from here on
    shutil.rmtree(root / record, ignore_errors=True)


def _check_clean(root: Path) -> None:
    """Open the repaired store as every command does and read each of its records: damage left is a
    bug in `repair`, said as such."""
    try:
        with RunStore.open_existing(root, readonly=True) as st:
            st.timeline()
            st.final()
            st.experts()
            for i in range(len(st.fragments())):
                for read in (st.found, st.confirmations, st.layouts, st.measurements, st.ranking):
                    read(i)
    except StoreDamaged as exc:
        problem = f"{exc.file}: {exc.detail}"
        raise StoreError(f"`repair` left the store damaged, which is a bug in mugraph: {problem}") from None


def resume_command(root: Path, plan: RepairPlan) -> str:
    """The command that finishes the run: the one that made the store (as its meta keeps it) with this
    store's path (it may have moved since) and without `--fresh`, which would delete what the repair
    kept; the `mugraph.optimize` call for a store made from Python; else the program's name and the
    store."""
    meta = plan.scan.attrs["meta"]
    recorded = resuming_command(meta, root)
    if recorded is not None:
        return recorded
    if made_from_python(meta):
        return python_call(root, meta)
    program = plan.scan.attrs["identity"].get("program", "PROGRAM")
    return "mugraph " + shlex.join(["optimize", program, "--store", str(root)])
