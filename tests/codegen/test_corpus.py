"""Slow: every confirmed μGraph collected from full benchmark runs (tests/stages/layout/data: the
116 of rms_norm, 20 of gated_mlp, lora's, a gqa subtree's) emits, runs in Triton's interpreter at the
benchmark shapes and matches its program's float64 reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mugraph.codegen import FP16_TOLERANCE
from mugraph.ir.serialize import loads
from mugraph.programs import builtin_programs
from mugraph.stages.fragments import split_program
from tests.helpers.emitting import emit_and_check

CORPUS = Path(__file__).resolve().parents[1] / "stages" / "layout" / "data" / "mugraphs.jsonl"
ROWS = [json.loads(line) for line in CORPUS.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['program']}-{r['source'].split(':')[0]}-{r['digest'][:12]}")
def test_collected_mugraph_emits_and_matches(row: dict[str, str]) -> None:
    reference = builtin_programs()[row["program"]].reference()
    if row["fragment"] != row["program"]:  # a fragment's μGraph: outputs named as the fragment's
        reference = next(f.graph for f in split_program(reference).fragments if f.name == row["fragment"])
    _, report = emit_and_check(loads(row["graph"]), reference)
    assert report.ok and report.max_rel_err <= FP16_TOLERANCE, report
