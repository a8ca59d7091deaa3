"""A program's name cannot put its default store, memo or report outside runs/."""

from __future__ import annotations

from pathlib import Path

import pytest

from mugraph.run.checks import file_name
from tests.helpers.cli_runs import done, mugraph

PROGRAM = """
from mugraph.ir.graph import KernelGraph

name = {name!r}


def reference() -> KernelGraph:
    g = KernelGraph()
    g.mark_output(g.exp(g.new_input((16, 64), name="X")), "O")
    return g
"""


@pytest.mark.parametrize("name", ["../../escaped", "/abs/path/escaped"])
def test_a_name_holding_a_path_is_refused_before_anything_is_made(tmp_path: Path, name: str) -> None:
    """Names are data: a program name with path separators is refused when the program loads."""
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    (cwd / "prog.py").write_text(PROGRAM.format(name=name))
    proc = mugraph("optimize", "prog.py", "--workers", "1", "--dashboard-address", "none", cwd=cwd)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "program name" in lines[0], proc.stderr
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["a", "a/b", "a/b/prog.py"]
    assert not Path("/abs").exists()


def test_default_paths_go_through_file_name(tmp_path: Path) -> None:
    name = "my prog+v2"  # a name allowed, which file_name still changes
    (tmp_path / "prog.py").write_text(PROGRAM.format(name=name))
    last = done(
        mugraph(
            "optimize",
            "prog.py",
            "--workers",
            "1",
            "--dashboard-address",
            ":0",
            "--json",
            "--set",
            "grids=[[16,1,1]]",
            cwd=tmp_path,
        )
    )
    assert last["complete"]
    made = {p.name for p in (tmp_path / "runs").iterdir()}
    assert len(made) == 3 and all(n.startswith(file_name(name) + "-") for n in made)  # store, memo, report
    assert file_name(name) == "my_prog+v2"


def test_file_name() -> None:
    assert file_name("../../x") == "x" and file_name("/abs/p") == "abs_p" and file_name("..") == "program"
    assert file_name("a b/c") == "a_b_c" and file_name("lora") == "lora" and len(file_name("x" * 500)) == 64
