"""Every built-in program's reference and experts, emitted and run in Triton's interpreter on the CPU,
match the float64 reference within the fp16 tolerance. The two slowest experts (4,096 block
iterations each) run at the benchmark shapes in the slow suite and narrowed here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mugraph.codegen import FP16_TOLERANCE, EmitInfo, emit_module
from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.serialize import loads
from mugraph.ir.types import OpKind
from mugraph.programs import builtin_programs
from mugraph.stages.combine import stitch
from mugraph.stages.fragments import split_program
from mugraph.stages.verify.check import float_max_rel_err
from tests.helpers.emitting import NARROW_PROGRAMS, emit_and_check

PROGRAMS = builtin_programs()
SLOW = {("rms_norm", "expert"), ("gated_mlp", "expert")}
ROOT = Path(__file__).resolve().parents[2]


def _cases() -> Iterator[object]:
    for name, prog in PROGRAMS.items():
        for label in ["reference", *prog.experts]:
            marks = [pytest.mark.slow] if (name, label) in SLOW else []
            yield pytest.param(name, label, marks=marks, id=f"{name}-{label}")


def _graph(name: str, label: str, narrow: bool = False) -> tuple[KernelGraph, KernelGraph]:
    prog = NARROW_PROGRAMS[name] if narrow else PROGRAMS[name]
    graph = prog.reference() if label == "reference" else prog.experts[label]()
    return graph, prog.reference()


def _assert_matches(graph: KernelGraph, reference: KernelGraph) -> str:
    source, report = emit_and_check(graph, reference)
    assert report.interpreted
    assert report.ok and report.max_rel_err <= FP16_TOLERANCE, report
    assert report.max_rel_err > 0  # fp16 rounding is there: the module really ran in fp16
    return source


def _assert_readable(source: str, graph: KernelGraph) -> None:
    """One kernel per graph-defined op, each naming its grid, for-loop and maps."""
    custom = [op for op in graph.ops if op.kind is OpKind.CUSTOMIZED]
    assert source.count("@triton.jit") == len(custom)
    for op in custom:
        assert isinstance(op.block, BlockGraph)
        assert f"# grid {list(op.block.grid)} (tl.program_id per axis), for-loop range {op.block.forloop}" in source
    assert len(re.findall(r"# s\d+ <- .*: imap \[.*\], fmap -?\d", source)) == sum(
        len(op.block.sources) for op in custom if op.block is not None
    )
    assert source.count(": omap [") == sum(len(op.block.output_shapes) for op in custom if op.block is not None)


@pytest.mark.parametrize(("name", "label"), list(_cases()))
def test_builtin_program_runs_and_matches(name: str, label: str) -> None:
    graph, reference = _graph(name, label)
    _assert_readable(_assert_matches(graph, reference), graph)


@pytest.mark.parametrize("name", sorted(NARROW_PROGRAMS))
def test_narrowed_slow_experts_run_and_match(name: str) -> None:
    graph, reference = _graph(name, "expert", narrow=True)
    _assert_readable(_assert_matches(graph, reference), graph)


def _fused_first_fragment() -> KernelGraph:
    """transformer_block's first fragment (rms_norm(X)·Wq·Kt) with rms_norm(X)·Wq as one kernel."""
    g = KernelGraph()
    x, wq, kt = g.new_input((16, 1024), name="X"), g.new_input((1024, 64), name="Wq"), g.new_input((64, 512), name="Kt")
    b = BlockGraph(grid=(4, 1, 1), forloop=16)
    xs = b.new_input(x, (-1, -1, -1), fmap=1)  # [16,64]
    ws = b.new_input(wq, (1, -1, -1), fmap=0)  # [64,16]
    b.new_output(b.div(b.accum_no_red(b.matmul(xs, ws)), b.accum_rms(xs)), (1, -1, -1))
    g.mark_output(g.matmul(g.customized(b)[0], kt), "o0")
    return g


def test_transformer_block_stitched_with_a_fused_fragment() -> None:
    """A multi-fragment program: the stitched program mixes a Triton kernel and array calls."""
    reference = PROGRAMS["transformer_block"].reference()
    split = split_program(reference)
    fused = _fused_first_fragment()
    assert float_max_rel_err(split.fragments[0].graph, fused, [0], np) < 1e-9
    stitched = stitch(split, {"f0": fused})
    source = _assert_matches(stitched, reference)
    _assert_readable(source, stitched)
    assert "xp.matmul(" in source and "xp.exp(" in source


def test_emitted_modules_are_ruff_clean(tmp_path: Path) -> None:
    """Under the project's own lint rules: every built-in program and expert, and every confirmed
    μGraph collected from full benchmark runs (tests/stages/layout/data)."""
    for name, prog in PROGRAMS.items():
        for label in ["reference", *prog.experts]:
            graph, _ = _graph(name, label)
            (tmp_path / f"{name}_{label}.py").write_text(emit_module(graph, EmitInfo(name, label)))
    corpus = ROOT / "tests" / "stages" / "layout" / "data" / "mugraphs.jsonl"
    for i, line in enumerate(corpus.read_text().splitlines()):
        row = json.loads(line)
        (tmp_path / f"collected_{i}.py").write_text(emit_module(loads(row["graph"]), EmitInfo(row["program"])))
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
