"""Checks of the typed records read back from a run store: a record whose checksum holds can still be
of the wrong shape (written by a different program, or edited and resealed), and its readers index
it as its TypedDict says. A record that is not is damage (StoreDamaged naming its file), never an
assertion or a KeyError deep in a reader.

Each check verifies the keys the record type requires and the types of the fields that the driver,
`show` and the report act on; other fields pass as stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from mugraph.ir.names import BadNameError, check_label
from mugraph.storage.run.errors import damaged
from mugraph.storage.run.run_records import (
    ConfirmationRecord,
    ExpertRecord,
    FragmentRecord,
    JsonObject,
    LayoutRecord,
    MeasurementRecord,
    ProgressSample,
)

__all__ = [
    "DIGEST",
    "check_confirmation",
    "check_experts",
    "check_fragments",
    "check_layout",
    "check_measurement",
    "check_samples",
]

DIGEST = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.-]{0,127}")  # a μGraph's digest, as records are named by it

_Types = Mapping[str, type | tuple[type, ...]]
_TEXT_LIST = "a list of strings"
_FRAGMENT: _Types = {"name": str, "digest": str, "graph": str, "config": str, "preset": str}
_CONFIRMATION: _Types = {"equivalent": bool, "digest": str, "run_seconds": (int, float)}
_LAYOUT: _Types = {"schema": str, "io_layouts": dict, "error": str}
_MEASUREMENT: _Types = {"ok": bool, "median_seconds": (int, float), "error": str}
_EXPERT: _Types = {"label": str, "digest": str}


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


def check_experts(value: Any, file: Path) -> list[ExpertRecord]:
    """The program's experts, each a label as a program may name one and a digest as a μGraph has:
    `show` prints both."""
    if not isinstance(value, list):
        raise damaged(file, "experts is not a list")
    for e in value:
        _check(e, ExpertRecord.__required_keys__, _EXPERT, file, "an expert")
        try:
            check_label(e["label"], "expert")
        except BadNameError as exc:
            raise damaged(file, str(exc)) from None
        if not DIGEST.fullmatch(e["digest"]):
            raise damaged(file, f"expert {e['label']!r}: digest {e['digest']!r:.60} is not a plain name")
    return cast(list[ExpertRecord], value)
