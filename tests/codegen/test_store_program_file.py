"""Reading a run store runs no program file the user did not name: a store whose recorded command
names a Python file (edited, its checksum recomputed, as anyone can) is shown and refused by `emit`
without that file ever being imported; `emit --program FILE` and `repair --program FILE` run the
file the user names. Real subprocesses over a store a real program-file run made."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mugraph.storage.run.root import _root_crc
from tests.helpers.cli_runs import done, mugraph
from tests.helpers.store_edits import edit_final_program, first_kind

PROGRAM = """
from mugraph.ir.graph import KernelGraph


def reference() -> KernelGraph:
    g = KernelGraph()
    g.mark_output(g.exp(g.new_input((16, 64), name="X")), "O")
    return g
"""
# the same program, but importing it leaves a mark
PLANTED = "import pathlib\npathlib.Path(__file__).with_name('MARKER').write_text('imported')\n" + PROGRAM


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("prog")
    (cwd / "prog.py").write_text(PROGRAM)
    args = ["--workers", "1", "--dashboard-address", "none", "--set", "grids=[[16,1,1]]", "--store", "s.zarr"]
    assert done(mugraph("optimize", "prog.py", *args, "--json", cwd=cwd))["complete"]
    return cwd / "s.zarr"


def one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mugraph: error: "), proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def naming(store: Path, program: Path) -> None:
    """The store's recorded command made to name `program`, its root checksum recomputed."""
    file = store / "zarr.json"
    meta = json.loads(file.read_text())
    attrs = meta["attributes"]
    attrs["meta"]["command"][1] = str(program)
    attrs["crc32"] = _root_crc(attrs)
    file.write_text(json.dumps(meta))


def test_show_and_emit_never_import_a_program_file_the_store_names(made: Path, tmp_path: Path) -> None:
    store = Path(shutil.copytree(made, tmp_path / "s.zarr"))
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    naming(store, planted)
    shown = mugraph("show", str(store), cwd=tmp_path)
    assert shown.returncode == 0 and "run complete" in shown.stdout, shown.stderr
    assert not (tmp_path / "MARKER").exists()
    one_line_error(mugraph("emit", str(store), "--out", "k.py", cwd=tmp_path), f"pass --program {planted}")
    assert not (tmp_path / "k.py").exists()
    best = json.loads((store / "final" / "zarr.json").read_text())["attributes"]["final"]["best"]
    one = mugraph("emit", str(store), "--digest", best, "--out", "d.py", cwd=tmp_path)  # its fragment alone
    assert one.returncode == 0 and (tmp_path / "d.py").is_file(), one.stderr
    assert not (tmp_path / "MARKER").exists()


def test_emit_runs_the_program_file_the_user_names(made: Path, tmp_path: Path) -> None:
    store = Path(shutil.copytree(made, tmp_path / "s.zarr"))
    (tmp_path / "prog.py").write_text(PROGRAM)
    proc = mugraph("emit", str(store), "--program", "prog.py", "--out", "k.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "skipped" not in proc.stderr and (tmp_path / "k.py").is_file()
    one_line_error(mugraph("emit", "prog.py", "--program", "prog.py", cwd=tmp_path), "--program")


def test_an_edited_final_program_of_a_program_file_is_checked_by_repair_with_the_file_named(
    made: Path, tmp_path: Path
) -> None:
    """`emit --program` refuses the edited final program and names the `repair` that drops it; `repair`
    without the file says it could not check the final program and how to let it."""
    store = Path(shutil.copytree(made, tmp_path / "s.zarr"))
    (tmp_path / "prog.py").write_text(PROGRAM)
    edit_final_program(store, first_kind("exp", "sqrt"))
    proc = mugraph("emit", str(store), "--program", "prog.py", "--out", "k.py", cwd=tmp_path)
    one_line_error(proc, "does not compute the program", f"run `mugraph repair {store} --program prog.py`")
    unchecked = mugraph("repair", str(store), "--dry-run", cwd=tmp_path)
    assert unchecked.returncode == 2 and "final/zarr.json was not checked" in unchecked.stdout, unchecked.stdout
    assert f"pass --program {made.parent / 'prog.py'}" in unchecked.stdout, unchecked.stdout
    assert "nothing to repair" not in unchecked.stdout, unchecked.stdout
    named = mugraph("repair", str(store), "--program", "prog.py", cwd=tmp_path)
    assert named.returncode == 0 and "dropped the final record" in named.stdout, named.stdout + named.stderr
