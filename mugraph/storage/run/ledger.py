"""The run store's ledger: what the run has committed, so a missing record is damage, never "not found yet".

`ledger.jsonl` in the store holds one line per record the run wrote (the fragments, each found μGraph,
confirmation, layout, ranking, timeline and the final result), appended after the record itself is on
disk; each line carries the CRC-32 of its record path. The task rows are indexed by the task table's own
commit record. On open every record the ledger names must exist: a deleted `found/0/<digest>/`, all of
`found/` or `fragments/zarr.json` is reported as damage naming the file, instead of a run that finishes
"complete" with fewer μGraphs. A crash mid-append leaves a line without its newline: it is ignored (the
record it names is not needed by anything committed) and the writer cuts it off before appending.
The file is never opened through a symbolic link (`safe_files`): a link is damage.

The ledger alone cannot tell an emptied file from a new run; `cross_checks` compares the records with
each other and with the task table's count of found μGraphs, which do not depend on it.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

from mugraph.storage.run.atomic_store import write_atomic
from mugraph.storage.run.errors import damaged
from mugraph.storage.run.records import metadata_file
from mugraph.storage.safe_files import LinkFound, open_nofollow, read_nofollow

__all__ = ["LEDGER_NAME", "Ledger", "parse_lines", "rewrite_ledger"]

LEDGER_NAME = "ledger.jsonl"


def _line(record: str) -> bytes:
    return (json.dumps({"record": record, "crc32": zlib.crc32(record.encode())}) + "\n").encode()


def parse_lines(complete: bytes, file: Path) -> list[str]:
    """The records named by the complete lines `complete` of the ledger `file`, in order;
    StoreDamaged naming the file at the first bad line."""
    records: list[str] = []
    for number, raw in enumerate(complete.split(b"\n") if complete else [], 1):
        try:
            entry = json.loads(raw)
            record = entry["record"]
            if not isinstance(record, str) or entry["crc32"] != zlib.crc32(record.encode()):
                raise ValueError("checksum mismatch")
        except (ValueError, KeyError, TypeError) as exc:
            raise damaged(file, f"line {number}: {exc}") from None
        records.append(record)
    return records


def rewrite_ledger(root: Path, records: Iterable[str], *, durable: bool = False) -> None:
    """Replace the ledger whole, in one atomic file, by these records: what `repair` leaves after it
    dropped damaged records or rebuilt a damaged ledger from the records on disk."""
    write_atomic(root / LEDGER_NAME, b"".join(_line(r) for r in dict.fromkeys(records)), durable=durable)


class Ledger:
    """The set of committed record paths of one store, and (for the writer) the file to append to."""

    def __init__(self, root: Path, records: set[str], *, durable: bool) -> None:
        self.root = root
        self.records = records
        self.durable = durable

    @property
    def file(self) -> Path:
        return self.root / LEDGER_NAME

    @classmethod
    def create(cls, root: Path, *, durable: bool) -> Ledger:
        """An empty ledger in a store being built."""
        os.close(open_nofollow(root / LEDGER_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        return cls(root, set(), durable=durable)

    @classmethod
    def load(cls, root: Path, *, writer: bool, durable: bool = False) -> Ledger:
        """Read the ledger (StoreDamaged naming it if it is missing or a complete line is bad) and check
        that every record it names is on disk (StoreDamaged naming the first missing file)."""
        file = root / LEDGER_NAME
        try:
            data = read_nofollow(file)
        except FileNotFoundError:
            raise damaged(file, "missing (it lists what the run has committed)") from None
        except LinkFound as exc:
            raise damaged(file, exc.problem) from None
        except OSError as exc:
            raise damaged(file, exc) from None
        complete, _, torn = data.rpartition(b"\n")
        if torn and writer:  # a crash mid-append: drop the partial line before appending more
            try:
                fd = open_nofollow(file, os.O_RDWR)
            except LinkFound as exc:
                raise damaged(file, exc.problem) from None
            try:
                os.ftruncate(fd, len(complete) + 1 if complete else 0)
            finally:
                os.close(fd)
        ledger = cls(root, set(parse_lines(complete, file)), durable=durable)
        ledger.check()
        return ledger

    def check(self) -> None:
        """StoreDamaged naming the first committed record whose file is gone (and how many are)."""
        missing = sorted(r for r in self.records if not metadata_file(self.root, r).is_file())
        if missing:
            more = f" (and {len(missing) - 1} more committed records)" if len(missing) > 1 else ""
            raise damaged(metadata_file(self.root, missing[0]), f"missing, though the run committed it{more}")

    def add(self, records: Iterable[str]) -> None:
        """Append the records not yet listed, in one write (call after they are on disk)."""
        new = [r for r in dict.fromkeys(records) if r not in self.records]
        if not new:
            return
        try:
            fd = open_nofollow(self.file, os.O_WRONLY | os.O_APPEND)
        except LinkFound as exc:
            raise damaged(self.file, exc.problem) from None
        except FileNotFoundError:  # the store was deleted under the run: --fresh would not take what is left
            raise damaged(
                self.file,
                "missing (removed while the run was writing)",
                f"what the run wrote since is not a run store: remove {self.root} (rm -r) and run again, or "
                "choose another --store (store=)",
            ) from None
        with os.fdopen(fd, "ab") as f:
            f.write(b"".join(_line(r) for r in new))
            if self.durable:
                f.flush()
                os.fsync(f.fileno())
        self.records.update(new)
