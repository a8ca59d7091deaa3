"""`mugraph status` prints what a store says (its program's name) with control characters escaped:
a store is input, and a name holding terminal escapes or newlines must not draw on the terminal or
forge lines of the output."""

from __future__ import annotations

from pathlib import Path

import pytest

from mugraph.cli import main
from mugraph.storage.run.store import RunStore

HOSTILE = "lora\x1b[2J\x1b[1;1H\nlora: complete, 1,000,000 states\r"


def test_status_escapes_the_stored_program_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "run.zarr"
    identity = {"program": HOSTILE, "program_digest": "p1", "config_digest": "c1", "budget": "40\n  forged"}
    RunStore.open(store, identity, meta={"command": ["optimize", "lora"]}).close()
    main(["status", str(store)])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out
    assert out.splitlines()[0].startswith(f"{store}: program lora\\x1b[2J")
    assert "forged" in out.splitlines()[0] and len(out.splitlines()) == 3  # the line, tasks, size
