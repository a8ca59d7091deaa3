"""`mugraph emit` and `mugraph optimize --emit` as a person runs them: real subprocesses, a real
narrowed `optimize lora` run (its best
μGraph is confidently faster than the reference), Triton's interpreter for --check; errors are one line, exit 2."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mugraph.cli.records import EmitResult
from mugraph.codegen import FP16_TOLERANCE
from mugraph.codegen.check import FP32_TOLERANCE
from mugraph.codegen.timing import KernelTiming, TimingRecord
from tests.helpers.cli_runs import done, mugraph, optimize_args

KEYS = {"program", "digest", "ok", "max_rel_err", "interpreted", "seconds"}


def fits(record: Any, out: dict[str, Any]) -> bool:
    """`out` has every required key of the TypedDict `record` and no key it does not declare."""
    return bool(record.__required_keys__ <= set(out) <= record.__required_keys__ | record.__optional_keys__)


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    line = proc.stdout.strip().splitlines()[-1]
    out = json.loads(line)
    assert isinstance(out, dict)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    cwd = tmp_path_factory.mktemp("emit")
    proc = mugraph(*optimize_args("lora", cwd / "run.zarr", "--workers", "1", "--emit"), cwd=cwd)
    return cwd, done(proc)


def test_optimize_emit_writes_the_best_mugraph_and_it_matches(run: tuple[Path, dict[str, Any]]) -> None:
    cwd, last = run
    kernels = Path(last["kernels"])
    assert kernels == cwd / "run.kernels.py" and kernels.is_file()
    text = kernels.read_text()
    assert not last["not_confident"] and f"DIGEST = {last['best']!r}" in text and text.count("@triton.jit") >= 1
    assert "config: store" in text and "mugraph: " in text and "layouts chosen" in text
    proc = mugraph("emit", str(cwd / "run.zarr"), "--out", str(cwd / "again.py"), "--check", "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    out = last_json(proc)
    assert set(out) >= KEYS and out["program"] == "lora" and out["digest"] == last["best"]
    assert out["ok"] is True and out["interpreted"] is True and 0 < out["max_rel_err"] <= FP16_TOLERANCE
    assert (cwd / "again.py").read_text() == text  # the same module from the store, whoever writes it
    assert last["kernels_check"] == f"mugraph emit {shlex.quote(str(cwd / 'run.zarr'))} --check"


def test_optimize_emit_of_a_program_file_names_the_check_that_runs(tmp_path: Path) -> None:
    """A program file is run only where the user names it, so the check `optimize --emit` offers for
    its kernels names it with --program; that command, as printed, runs them and passes."""
    (tmp_path / "prog.py").write_text(EXP_PROGRAM.format(n=64))
    args = ["--workers", "1", "--dashboard-address", "none", "--set", "grids=[[16,1,1]]", "--store", "s.zarr"]
    last = done(mugraph("optimize", "prog.py", *args, "--emit", "--json", cwd=tmp_path))
    assert last["kernels_check"] == "mugraph emit s.zarr --program prog.py --check"
    proc = mugraph(*shlex.split(last["kernels_check"])[1:], "--out", "k.py", cwd=tmp_path)
    assert proc.returncode == 0 and "k.py" in proc.stderr, proc.stderr
    bare = mugraph("emit", "s.zarr", "--check", "--out", "k2.py", cwd=tmp_path)  # what was offered before
    assert bare.returncode == 2 and "pass --program prog.py" in bare.stderr, bare.stderr


def test_emit_a_confirmed_digest_of_a_store(run: tuple[Path, dict[str, Any]]) -> None:
    cwd, last = run
    proc = mugraph("emit", str(cwd / "run.zarr"), "--digest", last["best"][:12], "--out", str(cwd / "d.py"), cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert f"DIGEST = {last['best']!r}" in (cwd / "d.py").read_text()
    proc = mugraph("emit", str(cwd / "run.zarr"), "--digest", last["best"][:12], "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert last_json(proc)["out"] == "lora.kernels.py"  # not stdout, which holds the JSON line
    assert (cwd / "lora.kernels.py").read_text() == (cwd / "d.py").read_text()


def test_emit_program_check_json(tmp_path: Path) -> None:
    proc = mugraph("emit", "lora", "--expert", "saved", "--check", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = last_json(proc)
    assert set(out) >= KEYS and out["ok"] is True and out["interpreted"] is True and out["program"] == "lora"
    assert fits(EmitResult, out) and {"per_output", "run_seconds", "seconds"} <= set(out)
    text = mugraph("emit", "lora", "--expert", "saved", cwd=tmp_path).stdout
    assert text.startswith('"""lora: a μGraph as Triton kernels') and "def run(inputs" in text


def test_emit_json_without_out_writes_the_module_it_names(tmp_path: Path) -> None:
    """With --json, stdout holds the JSON line, so the module goes to NAME.kernels.py in the current
    directory, the name `optimize --emit` gives its file, and the JSON says where."""
    proc = mugraph("emit", "lora", "--expert", "saved", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = last_json(proc)
    assert out["out"] == "lora.kernels.py" and len(proc.stdout.strip().splitlines()) == 1
    text = (tmp_path / "lora.kernels.py").read_text()
    assert text.startswith('"""lora: a μGraph as Triton kernels') and "def run(inputs" in text


def test_emit_never_writes_over_a_file_it_did_not_write(tmp_path: Path) -> None:
    """The program file being read, a user's own file at --out or at --json's default NAME.kernels.py:
    each is refused in one line naming it, and left as it was; emit's own module is written again."""
    (tmp_path / "f32.py").write_text(FLOAT32_PROGRAM)
    (tmp_path / "lora.kernels.py").write_text("mine\n")
    (tmp_path / "mine.py").write_text("mine\n")
    refused = [
        (["emit", "f32.py", "--expert", "reference", "--out", "f32.py"], ["f32.py is the program file"]),
        (["emit", "lora", "--json"], ["lora.kernels.py exists and is not a module", "--out"]),
        (["emit", "lora", "--out", "mine.py"], ["mine.py exists and is not a module", "another --out"]),
        (["emit", "lora", "--out", "nodir/k.py"], ["nodir", "does not exist"]),
        (  # before the search, not after it
            ["optimize", "lora", "--emit", "--store", "s.zarr", "--time-limit", "5", "--dashboard-address", "none"],
            ["s.kernels.py exists and is not a module", "without --emit"],
        ),
    ]
    (tmp_path / "s.kernels.py").write_text("mine\n")
    for args, words in refused:
        _one_line_error(mugraph(*args, cwd=tmp_path), *words)
    assert (tmp_path / "f32.py").read_text() == FLOAT32_PROGRAM and (tmp_path / "mine.py").read_text() == "mine\n"
    assert (tmp_path / "lora.kernels.py").read_text() == "mine\n"
    assert not (tmp_path / "s.zarr").exists() and (tmp_path / "s.kernels.py").read_text() == "mine\n"
    for _ in range(2):
        proc = mugraph("emit", "lora", "--out", "k.py", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr


EXP_PROGRAM = """
from mugraph.ir.graph import KernelGraph


def reference() -> KernelGraph:
    g = KernelGraph()
    g.mark_output(g.exp(g.new_input((16, {n}), name="X")), "O")
    return g
"""


def test_emit_of_a_store_whose_program_file_changed_says_so(tmp_path: Path) -> None:
    """The store's program file (named with --program, as a program file always is) edited after the
    run: a plain emit says the float64 cross-check was skipped and why, `--check` says the file
    changed (not that it cannot be found); a removed file is said to be missing."""
    (tmp_path / "prog.py").write_text(EXP_PROGRAM.format(n=64))
    args = ["--workers", "1", "--dashboard-address", "none", "--set", "grids=[[16,1,1]]", "--store", "s.zarr"]
    assert done(mugraph("optimize", "prog.py", *args, "--json", cwd=tmp_path))["complete"]
    (tmp_path / "prog.py").write_text(EXP_PROGRAM.format(n=32))
    plain = mugraph("emit", "s.zarr", "--program", "prog.py", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert (
        "float64 cross-check of the stored program against the program it computes was skipped: prog.py is not "
        "the program of this run, or has changed since it" in plain.stderr
    ), plain.stderr
    check = ["emit", "s.zarr", "--check", "--program", "prog.py"]
    _one_line_error(mugraph(*check, cwd=tmp_path), "prog.py is not the program of this run, or has changed")
    (tmp_path / "prog.py").unlink()
    _one_line_error(mugraph(*check, cwd=tmp_path), "prog.py: no such file")


FLOAT32_PROGRAM = """
from mugraph.ir import KernelGraph

def reference():
    g = KernelGraph()
    x = g.new_input((16, 64), dtype="float32", name="X")
    w = g.new_input((64, 32), dtype="float32", name="W")
    g.mark_output(g.exp(g.matmul(x, w)), "O")
    return g
"""


def test_emit_check_says_the_tolerance_it_applied(tmp_path: Path) -> None:
    """A float32 program is checked to FP32_TOLERANCE, and that is the tolerance printed."""
    (tmp_path / "f32.py").write_text(FLOAT32_PROGRAM)
    proc = mugraph("emit", "f32.py", "--expert", "reference", "--check", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert last_json(proc)["tolerance"] == FP32_TOLERANCE != FP16_TOLERANCE
    text = mugraph("emit", "f32.py", "--expert", "reference", "--check", "--out", "k.py", cwd=tmp_path)
    assert f"(tolerance {FP32_TOLERANCE:g})" in text.stderr, text.stderr
    lora = mugraph("emit", "lora", "--expert", "saved", "--check", "--out", "l.py", cwd=tmp_path)
    assert f"(tolerance {FP16_TOLERANCE:g})" in lora.stderr, lora.stderr


def test_timing_record_names_every_field_of_a_timing() -> None:
    """`emit --time` and a GPU worker's measurement write KernelTiming.as_dict(): its record type
    declares exactly the dataclass's fields, so a field added to one without the other fails here."""
    timing = KernelTiming("GPU X", 2e-6, 1e-6, 3e-5, 20, 3, 0.5, 1e-4, True, True)
    assert fits(TimingRecord, dict(timing.as_dict()))
    assert list(TimingRecord.__annotations__) == list(KernelTiming.__dataclass_fields__)


def _one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mugraph: error: "), proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["emit", "no_such_program"], ["unknown program"]),
        (["emit", "lora", "--expert", "nope"], ["no expert 'nope'"]),
        (["emit", "lora", "--digest", "ffffffffff"], ["no μGraph", "ffffffffff"]),
        (["emit", ".", "--expert", "saved"], ["--expert"]),
        (["emit", "."], ["not a mugraph run store"]),
        (["emit", "nonexist.zarr"], ["no run store at nonexist.zarr, and no program by that name"]),
        (["emit", "runs/typo"], ["no run store at runs/typo"]),
    ],
)
def test_emit_errors_are_one_line(tmp_path: Path, args: list[str], words: list[str]) -> None:
    _one_line_error(mugraph(*args, cwd=tmp_path), *words)


def test_missing_triton_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    """Triton made unimportable in the CLI's process (a None entry in sys.modules, as for a
    package that is not installed)."""
    hide = "import sys; sys.modules['triton'] = None; from mugraph.cli import main; main(sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for args in (["emit", "lora"], ["optimize", "rms_norm", "--emit", "--store", str(tmp_path / "r.zarr")]):
        proc = subprocess.run(
            [sys.executable, "-c", hide, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
        )
        _one_line_error(proc, "pip install -e '.[kernels]'")
        assert not (tmp_path / "r.zarr").exists()  # refused before the run started
