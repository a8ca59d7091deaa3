"""A program's name cannot put its default store, memo or report outside runs/."""

from __future__ import annotations

from pathlib import Path

import pytest

from mugraph.cli_checks import file_name
from tests.pipeline.conftest import done, mugraph

PROGRAM = '''
from mugraph.ir.graph import KernelGraph

name = {name!r}


def reference() -> KernelGraph:
    g = KernelGraph()
    g.mark_output(g.exp(g.new_input((16, 64), name="X")), "O")
    return g
'''


@pytest.mark.parametrize("name", ["../../escaped", "/abs/path/escaped"])
def test_default_paths_stay_in_runs(tmp_path: Path, name: str) -> None:
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    (cwd / "prog.py").write_text(PROGRAM.format(name=name))
    last = done(mugraph("optimize", "prog.py", "--workers", "1", "--dashboard-address", ":0", "--json",
                        "--set", "grids=[[16,1,1]]", cwd=cwd))
    assert last["complete"]
    made = {p.name for p in (cwd / "runs").iterdir()}
    assert len(made) == 3 and all(n.startswith(file_name(name) + "-") for n in made)  # store, memo, report
    assert sorted(p.name for p in tmp_path.rglob("*") if "escaped" in p.name and p.parent.name != "runs") == []
    assert not Path("/abs").exists()


def test_file_name() -> None:
    assert file_name("../../x") == "x" and file_name("/abs/p") == "abs_p" and file_name("..") == "program"
    assert file_name("a b/c") == "a_b_c" and file_name("lora") == "lora" and len(file_name("x" * 500)) == 64
