"""What differs between a run store and the run given it, said by setting: the store's identity holds
only the digest of the search settings, so a store made with other `--set` values or another preset
would be refused naming two digests. Its fragment records keep each fragment's settings whole. And what
a store of another program holds, said where it is refused, so that the user sees what they would lose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mugraph.ir.errors import MugraphError
from mugraph.ir.plural import counted
from mugraph.pipeline.plan import RunPlan
from mugraph.storage.run.backends import open_existing

__all__ = ["held_by", "setting_changes"]

SHOWN = 4  # settings named in one message; the rest are counted


def _text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def setting_changes(store: Path, plan: RunPlan) -> list[str]:
    """'f0 franges: stored [4,16,64], given [4]' for each search setting (and preset) that differs
    between the store's fragments and the plan's, by fragment name; empty where the store cannot be
    read or its fragments are another program's (the identity's other entries then say so)."""
    try:
        with open_existing(store, readonly=True) as st:
            stored = {f["name"]: f for f in st.fragments()}
    except MugraphError:
        return []
    changes: list[str] = []
    for fp in plan.fragments:
        record = stored.get(fp.spec.name)
        if record is None:
            continue
        if record.get("preset") != fp.config.preset:
            changes.append(f"{fp.spec.name} preset: stored {record.get('preset')}, given {fp.config.preset}")
        old, new = json.loads(record["config"]), json.loads(fp.payload.config)
        for key in sorted(set(old) | set(new)):
            if key != "preset" and old.get(key) != new.get(key):
                changes.append(f"{fp.spec.name} {key}: stored {_text(old.get(key))}, given {_text(new.get(key))}")
    if len(changes) > SHOWN:
        changes = [*changes[:SHOWN], f"{len(changes) - SHOWN} more"]
    return changes


def held_by(store: Path) -> str:
    """'complete, 46 μGraphs found' (or 'not complete', or 'running (pid N)'): what the run in `store`
    got so far; empty where the store cannot be read."""
    try:
        with open_existing(store, readonly=True) as st:
            final, writer = st.final(), st.writer()
            found = sum(len(st.found(i)) for i in range(len(st.fragments())))
    except (MugraphError, OSError):
        return ""
    state = "complete" if final and final.get("complete") else f"running (pid {writer})" if writer else "not complete"
    return f"{state}, {counted(found, 'μGraph')} found"
