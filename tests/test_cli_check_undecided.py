"""`mugraph check` on a program file, as a user runs it: an expert that writes gelu as silu·exp is not
accepted (exit 1, the output named), and one that splits the softmax scale across Q and K is
UNDECIDED with a reason that says what to write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mugraph.cli import main

FILES = Path(__file__).parent / "programs" / "files"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str]:
    try:
        main(argv)
        status: object = 0
    except SystemExit as e:
        status = e.code
    return status, capsys.readouterr().out


def test_check_does_not_accept_gelu_written_as_silu_times_exp(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(["check", str(FILES / "gelu_branch.py"), "--json"], capsys)
    summary = json.loads(out.strip().splitlines()[-1])
    rows = {row["expert"]: row for row in summary["experts"]}
    assert status == 1 and not summary["equivalent"]
    assert rows["right"]["equivalent"]
    assert not rows["silu_exp"]["equivalent"]
    assert rows["silu_exp"]["reason"].startswith("fingerprints differ on output 'O'"), rows["silu_exp"]


def test_check_says_to_write_a_split_scale_once(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(["check", str(FILES / "attention_scale.py")], capsys)
    line = next(ln for ln in out.splitlines() if "[split]" in ln)
    assert status == 1 and "[split]: UNDECIDED (fingerprints differ on output 'O'; yet float64 agrees" in line, out
    assert "fractional powers are rounded" in line and "write the scale once, as the program does" in line, line
    assert "[once]: EQUIVALENT" in out and out.strip().splitlines()[-1].startswith("attention_scale: UNDECIDED")
