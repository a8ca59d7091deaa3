"""`mugraph emit STORE --digest D` on a program of two fragments (a narrowed run of Y = gelu(X·W1)·W2,
real subprocesses): the chosen fragment's μGraph is stitched into the whole program, so the module
takes and returns the program's own tensors by name, whichever fragment D belongs to."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli_runs import done, mugraph

PROGRAM = """
from mugraph.ir import KernelGraph


def reference():
    g = KernelGraph()
    x, w1, w2 = g.new_input((16, 256), name="X"), g.new_input((256, 512), name="W1"), g.new_input((512, 256), name="W2")
    g.mark_output(g.matmul(g.gelu(g.matmul(x, w1)), w2), "Y")
    return g


experts = {}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    cwd = tmp_path_factory.mktemp("emit-digest")
    (cwd / "mlp.py").write_text(PROGRAM)
    narrow = ["--set", "grids=[[8,1,1]]", "--set", "franges=[4,16]", "--dashboard-address", "none"]
    proc = mugraph("optimize", "mlp.py", "--workers", "1", "--store", "m.zarr", "--json", *narrow, cwd=cwd)
    return cwd, done(proc)


def _io(text: str) -> tuple[list[str], list[str]]:
    """The names a module's `run` reads and returns."""
    inputs = re.search(r"^INPUTS = \{(.*)\}$", text, re.M)
    returns = re.search(r"^    return \{(.*)\}$", text, re.M)
    assert inputs is not None and returns is not None, text[-2000:]
    return re.findall(r"'([^']+)':", inputs.group(1)), re.findall(r"'([^']+)':", returns.group(1))


@pytest.mark.parametrize("fragment", ["f0", "f1"])
def test_a_fragments_mugraph_is_emitted_as_the_whole_program(run: tuple[Path, dict[str, Any]], fragment: str) -> None:
    cwd, last = run
    assert list(last["ranking"]) == ["f0", "f1"]
    rows = [r for r in last["ranking"][fragment] if not r.get("reference")]
    assert rows, f"the narrowed run confirmed nothing for {fragment}"
    digest = rows[-1]["digest"]  # the slowest confirmed one: not what the run chose
    out = cwd / f"{fragment}.py"
    args = ["--digest", digest[:12], "--out", str(out), "--check", "--interpret", "--json", "--program", "mlp.py"]
    proc = mugraph("emit", "m.zarr", *args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] is True and result["digest"] == digest
    text = out.read_text()
    assert _io(text) == (["X", "W1", "W2"], ["Y"])
    assert f"({fragment} from --digest, the other fragments' best)" in text.split("\n", 1)[0]


def test_show_names_the_program_output_a_fragments_output_is(run: tuple[Path, dict[str, Any]]) -> None:
    cwd, _ = run
    proc = mugraph("show", "m.zarr", "--program", "mlp.py", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert "outputs: o0 is the program's Y" in proc.stdout  # the second fragment's; the first feeds it
    assert proc.stdout.count("outputs: ") == 1
    unnamed = mugraph("show", "m.zarr", cwd=cwd)  # the program file is run only when named
    assert unnamed.returncode == 0 and "outputs: " not in unnamed.stdout, unnamed.stderr


def test_a_fragments_mugraph_without_the_program_file_is_emitted_alone_and_says_so(
    run: tuple[Path, dict[str, Any]],
) -> None:
    cwd, last = run
    digest = last["best_per_fragment"]["f0"]
    proc = mugraph("emit", "m.zarr", "--digest", digest[:12], "--out", "alone.py", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert "emitted f0 alone, with its own names: to stitch it into the whole program, pass --program mlp.py" in (
        proc.stderr
    )
