"""`check` and `explain` compare an expert's outputs with the reference's by name, as the emitted
module returns them: an expert that puts Q under the name K is a mismatch (exit 1 from both, the outputs named),
and one that marks or declares in another order but names right is equivalent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mugraph.cli import main

QK = str(Path(__file__).parent / "programs" / "files" / "qk_proj.py")
ADMIT = ["--memo-url", "local", "--set", 'kernel_ops=["matmul","rms_norm"]', "--set", "max_kernel_ops=6"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str, str]:
    try:
        main(argv)
        status: object = 0
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


def test_check_rejects_outputs_under_each_others_names(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["check", QK, "--json"], capsys)
    assert status == 1
    rows = {row["expert"]: row for row in json.loads(out.strip().splitlines()[-1])["experts"]}
    assert {label for label, row in rows.items() if row["equivalent"]} == {"right", "reordered", "inputs_reordered"}
    reason = rows["swapped"]["reason"]
    assert "'Q' (it computes the reference's 'K')" in reason and "'K' (it computes the reference's 'Q')" in reason


def test_check_prints_the_mismatching_output(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["check", QK], capsys)
    line = next(ln for ln in out.splitlines() if "[swapped]" in ln)
    assert status == 1 and "NOT equivalent (fingerprints differ on outputs 'Q'" in line, out
    assert "[right]: EQUIVALENT" in out and out.strip().splitlines()[-1].startswith("qk_proj: MISMATCH")


def test_explain_says_a_swapped_expert_is_not_equivalent(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["explain", QK, *ADMIT, "--json"], capsys)
    assert status == 1  # a mismatch, as `check` says of it; the others are explained all the same
    rows = {row["expert"]: row for row in map(json.loads, out.strip().splitlines())}
    assert not rows["swapped"]["inside"] and rows["swapped"]["rule"] == "not equivalent"
    assert "'Q' (it computes the reference's 'K')" in rows["swapped"]["reason"]
    # the others are one μGraph, found at one path, whatever order they mark or declare things in
    assert all(rows[label]["inside"] for label in ("right", "reordered", "inputs_reordered")), rows
    assert len({tuple(rows[label]["path"]) for label in ("right", "reordered", "inputs_reordered")}) == 1


RENAMED = """
from mugraph.ir import KernelGraph

def reference():
    g = KernelGraph()
    x, w = g.new_input((16, 64), name="X"), g.new_input((64, 32), name="W")
    g.mark_output(g.matmul(x, w), "O")
    return g

def renamed():
    g = KernelGraph()
    x, w = g.new_input((16, 64), name="X"), g.new_input((64, 32), name="W")
    g.mark_output(g.matmul(x, w), "Y")
    return g

experts = {"renamed": renamed}
"""


def test_explain_of_an_expert_with_other_output_names_gives_no_seeds_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Names that differ differ on every seed: more seeds would not change the verdict."""
    (tmp_path / "renamed.py").write_text(RENAMED)
    status, out, _ = run(["explain", str(tmp_path / "renamed.py"), "--memo-url", "local", "--json"], capsys)
    row = json.loads(out.strip().splitlines()[-1])
    assert status == 1 and row["rule"] == "not equivalent" and "output names differ" in row["reason"], row
    assert "more seeds" not in row["reason"]


def test_an_infinite_error_is_strict_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An expert that overflows float64 has an infinite error: printed null, not Python's `Infinity`."""
    program = tmp_path / "overflow.py"
    program.write_text(
        "from mugraph.ir import KernelGraph\n"
        "def _g(big):\n"
        "    g = KernelGraph()\n"
        "    y = g.matmul(g.new_input((8, 16), name='X'), g.new_input((16, 8), name='W'))\n"
        "    g.mark_output(g.mul_scalar(g.mul_scalar(y, 1e300), 1e300) if big else y, 'O')\n"
        "    return g\n"
        "reference = lambda: _g(False)\n"
        "experts = {'overflow': lambda: _g(True)}\n"
    )
    status, out, _ = run(["check", str(program), "--json"], capsys)
    line = out.strip().splitlines()[-1]
    assert status == 1 and "Infinity" not in line and "NaN" not in line
    (row,) = json.loads(line, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))["experts"]
    assert not row["equivalent"] and row["float_max_rel_err"] is None
