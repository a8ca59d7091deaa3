"""Checks of the typed records read back from a run store: a record whose checksum holds can still be
of the wrong shape (written by a different program, or edited and resealed), and its readers index
it as its TypedDict says. A record that is not is damage (StoreDamaged naming its file), never an
assertion or a KeyError deep in a reader.

Each check verifies the keys the record type requires and the types of the fields that the driver,
`show` and the report act on; other fields pass as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from mugraph.storage.run.errors import damaged
from mugraph.storage.run.run_records import (
    ConfirmationRecord,
    FragmentRecord,
    JsonObject,
    LayoutRecord,
    MeasurementRecord,
    ProgressSample,
)

__all__ = ["check_confirmation", "check_fragments", "check_layout", "check_measurement", "check_samples"]

_Types = Mapping[str, type | tuple[type, ...]]
_TEXT_LIST = "a list of strings"
_FRAGMENT: _Types = {"name": str, "digest": str, "graph": str, "config": str, "preset": str}
_CONFIRMATION: _Types = {"equivalent": bool, "digest": str, "run_seconds": (int, float)}
_LAYOUT: _Types = {"schema": str, "io_layouts": dict, "error": str}
_MEASUREMENT: _Types = {"ok": bool, "median_seconds": (int, float), "error": str}


def _check(value: Any, required: frozenset[str], types: _Types, file: Path, what: str) -> JsonObject:
    """`value` as a dict holding every key in `required`, and `types`' keys (where present) of
    their types; StoreDamaged naming `file` otherwise."""
    if not isinstance(value, dict):
        raise damaged(file, f"{what} is not an object")
    missing = sorted(required - value.keys())
    if missing:
        raise damaged(file, f"{what} lacks {', '.join(missing)}")
    for key, kind in types.items():
        v = value.get(key)
        if key in value and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
            raise damaged(file, f"{what}: {key} {v!r:.60} is not of the recorded type")
    return value


def check_fragments(value: Any, file: Path) -> list[FragmentRecord]:
    if not isinstance(value, list) or not all(isinstance(f, dict) for f in value):
        raise damaged(file, "fragments is not a list of objects")
    for f in value:
        _check(f, FragmentRecord.__required_keys__, _FRAGMENT, file, "a fragment")
        for key in ("sources", "outputs"):
            if not isinstance(f[key], list) or not all(isinstance(x, str) for x in f[key]):
                raise damaged(file, f"fragment {f['name']!r}: {key} is not {_TEXT_LIST}")
    return cast(list[FragmentRecord], value)


def check_confirmation(value: Any, file: Path) -> ConfirmationRecord:
    return cast(
        ConfirmationRecord, _check(value, ConfirmationRecord.__required_keys__, _CONFIRMATION, file, "confirmation")
    )


def check_layout(value: Any, file: Path) -> LayoutRecord:
    return cast(LayoutRecord, _check(value, LayoutRecord.__required_keys__, _LAYOUT, file, "layout"))


def check_measurement(value: Any, file: Path) -> MeasurementRecord:
    return cast(
        MeasurementRecord, _check(value, MeasurementRecord.__required_keys__, _MEASUREMENT, file, "measurement")
    )


def check_samples(value: list[Any], file: Path) -> list[ProgressSample]:
    """An invocation's progress samples, each an object."""
    if not all(isinstance(s, dict) for s in value):
        raise damaged(file, "samples is not a list of objects")
    return cast(list[ProgressSample], value)
