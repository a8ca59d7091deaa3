"""The report is written without following a link planted under its temp file's name, and without
a password that the store's command line holds."""

from __future__ import annotations

import os
from pathlib import Path

from mugraph.dashboards.report import report_path, write_report
from mugraph.storage.run.store import RunStore

IDENTITY = {"program": "lora", "program_digest": "p1", "config_digest": "c1", "budget": "40"}


def new_store(path: Path, command: list[str]) -> Path:
    RunStore.open(path, IDENTITY, meta={"command": command}).close()
    return path


def test_a_link_planted_as_the_temp_file_is_not_written_through(tmp_path: Path) -> None:
    store = new_store(tmp_path / "run.zarr", ["optimize", "lora"])
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = report_path(store)
    planted = target.with_name(f".{target.name}.tmp")
    planted.symlink_to(victim)
    assert write_report(store) == target
    assert victim.read_text() == "keep me" and planted.is_symlink()
    assert "<html" in target.read_text() and not target.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == [planted.name]


def test_the_report_is_readable_by_others_like_any_written_file(tmp_path: Path) -> None:
    target = write_report(new_store(tmp_path / "run.zarr", ["optimize", "lora"]))
    assert os.stat(target).st_mode & 0o777 == 0o644


def test_a_password_in_a_stored_command_line_is_not_in_the_report(tmp_path: Path) -> None:
    """A store written before the command line was redacted may hold a memo URL's password."""
    command = ["optimize", "lora", "--memo-url", "redis://:s3cr3t@head:6379/0", "--memo-url=redis://u:s3cr3t@h:1/0"]
    text = write_report(new_store(tmp_path / "run.zarr", command)).read_text()
    assert "s3cr3t" not in text
    assert "redis://:***@head:6379/0" in text and "redis://u:***@h:1/0" in text
