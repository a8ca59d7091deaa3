"""`check` warns, in one stderr line, of inputs no output depends on and of ops whose results reach no
output (optimize leaves both out of its search without a word); its verdict and exit status stay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mugraph.cli import main

PROGRAM = """\
from mugraph.ir.graph import KernelGraph


def reference():
    g = KernelGraph()
    x = g.new_input((16, 32), name="X")
    w = g.new_input((32, 16), name="W")
{extra_inputs}    y = g.exp(g.matmul(x, w))
{dead_ops}    g.mark_output(y, "O")
    return g


experts = {{}}
"""
UNUSED = '    g.new_input((16, 16), name="U")\n    g.new_input((16, 16), name="V")\n'
DEAD = "    g.square(g.matmul(x, w))\n"


@pytest.mark.parametrize(
    ("extra_inputs", "dead_ops", "said"),
    [
        (UNUSED, "", "no output depends on inputs U, V (optimize leaves them out of its search)"),
        ("", DEAD, "2 ops (matmul, square) reach no output (optimize"),
        (UNUSED, DEAD, "no output depends on inputs U, V; 2 ops (matmul, square) reach no output (optimize"),
        ("", "", None),
    ],
)
def test_check_warns_of_what_no_output_reads(
    extra_inputs: str, dead_ops: str, said: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM.format(extra_inputs=extra_inputs, dead_ops=dead_ops), encoding="utf-8")
    main(["check", str(path), "--json"])  # returns: exit status 0
    out, err = capsys.readouterr()
    assert json.loads(out)["equivalent"] is True
    if said is None:
        assert err == ""
    else:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("mugraph: warning: prog: ") and said in lines[0], err
