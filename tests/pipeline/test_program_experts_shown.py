"""`show` and the report mark a program file's own experts, under its own labels, from what the run
recorded in its store, where the file's reference is a built-in's (rms_norm's): never the built-in's
experts, whose μGraphs may be the file's under other labels. A store made before the run kept that
record is still read, and marked as before, by the built-in program."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mugraph.storage.run.ledger import LEDGER_NAME, rewrite_ledger
from tests.helpers.cli_runs import done, mugraph

# rms_norm's reference; `mine` is the built-in's `expert` (grid 64, for-loop range 64) under another
# label, `wide` no built-in's, `far` the built-in's `paper`, outside the narrowed space below
PROGRAM = """
from mugraph.ir import BlockGraph, KernelGraph

def inputs():
    g = KernelGraph()
    return g, g.new_input((16, 4096), name="X"), g.new_input((4096, 6144), name="W")

def reference():
    g, x, w = inputs()
    g.mark_output(g.matmul(g.rms_norm(x), w), "O")
    return g

def fused(blocks, forloop):
    def build():
        g, xd, wd = inputs()
        b = BlockGraph(grid=(blocks, 1, 1), forloop=forloop)
        x = b.new_input(xd, imap=(-1, -1, -1), fmap=1)
        w = b.new_input(wd, imap=(1, -1, -1), fmap=0)
        b.new_output(b.div(b.accum_no_red(b.matmul(x, w)), b.accum_rms(x)), omap=(1, -1, -1))
        g.mark_output(g.customized(b)[0], "O")
        return g
    return build

experts = {"mine": fused(64, 64), "wide": fused(128, 64), "far": fused(256, 32)}
"""

NARROW = {"grids": [[64, 1, 1], [128, 1, 1]], "franges": [64], "kernel_ops": [], "imaps": [[-1, -1, -1], [1, -1, -1]]}


def marked(text: str) -> dict[str, str]:
    """The expert mark of each marked ranking row of `show`'s text, by the row's short digest."""
    rows = [line for line in text.splitlines() if "(expert " in line]
    return {line.split()[1]: line.split("(expert ")[1].split(")")[0] for line in rows}


@pytest.mark.slow  # a lora program file's whole run: about 16 s
def test_show_and_the_report_name_the_program_files_own_experts(tmp_path: Path) -> None:
    (tmp_path / "rms_norm.py").write_text(PROGRAM)
    settings = [a for k, v in NARROW.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    store = tmp_path / "run.zarr"
    args = ["optimize", "rms_norm.py", *settings, "--store", str(store), "--workers", "1", "--json"]
    last = done(mugraph(*args, "--dashboard-address", "none", cwd=tmp_path))
    said = last["expert"]
    assert "expert 'mine' found" in said and "expert 'wide' found" in said and "'far' NOT found" in said
    shown = mugraph("show", str(store), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    notes = [line.strip() for line in shown.stdout.splitlines() if line.strip().startswith("expert ")]
    assert len(notes) == 1, shown.stdout
    ranked = len(last["ranking"]["f0"]) + 1  # the μGraphs and the reference
    assert notes[0].startswith("expert 'mine' ranks ") and f" of {ranked}; expert 'wide' ranks " in notes[0]
    assert notes[0].endswith("; expert 'far' was not found (`mugraph explain` says why)"), notes[0]
    marks = marked(shown.stdout)
    assert sorted(marks.values()) == ["mine", "wide"], shown.stdout  # never the built-in's 'expert'
    report = (tmp_path / "run.report.html").read_text()
    assert "(expert mine)" in report and "(expert wide)" in report and "(expert expert)" not in report
    assert "expert &#x27;far&#x27; was not found" in report and "&#x27;paper&#x27;" not in report

    # the same store as a mugraph that kept no experts record made it: the built-in's, as before
    old = tmp_path / "old.zarr"
    shutil.copytree(store, old)
    shutil.rmtree(old / "experts")
    kept = [json.loads(line)["record"] for line in (old / LEDGER_NAME).read_text().splitlines()]
    rewrite_ledger(old, [r for r in kept if r != "experts"])
    before = mugraph("show", str(old), cwd=tmp_path)
    assert before.returncode == 0, before.stderr
    assert marked(before.stdout) == {d: "expert" for d, label in marks.items() if label == "mine"}
    assert "expert 'expert' ranks " in before.stdout and "expert 'paper' was not found" in before.stdout
