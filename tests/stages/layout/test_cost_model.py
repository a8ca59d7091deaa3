"""The emitted-kernel cost model against the recorded H100 timings (benchmarks/data): its order and
the sign of each speedup over the reference, never hard-coded times."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.graph import KernelGraph
from mugraph.programs import builtin_programs
from mugraph.stages.layout.emitted import estimate_emitted
from mugraph.stages.layout.profiles import get_profile

DATA = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "gpu_kernels_h100_2026-11-23.json"
HELD_OUT = {"gqa", "rms_norm", "transformer_block"}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    """The recorded rows whose μGraphs the built-in programs rebuild, each with the model's estimate."""
    graphs: dict[str, KernelGraph] = {}
    for prog in builtin_programs().values():
        for build in (prog.reference, *prog.experts.values()):
            g = build()
            graphs[canonical_digest(g)] = g
    recorded = json.loads(DATA.read_text())["rows"]
    p = get_profile("H100")
    out = [{**r, "estimate": estimate_emitted(graphs[r["digest"]], p).seconds}
           for r in recorded if r["digest"] in graphs]
    assert len(out) >= 15  # every reference and expert of the recorded programs
    return out


def _reference(rows: list[dict[str, Any]], program: str) -> dict[str, Any]:
    return next(r for r in rows if r["program"] == program and r["what"] == "reference")


def test_no_measured_slowdown_is_estimated_faster(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        ref = _reference(rows, r["program"])
        if r["median_seconds"] > ref["median_seconds"]:
            assert r["estimate"] > ref["estimate"], f"{r['program']} {r['what']} sold as a speedup"


def test_clear_speedups_keep_their_sign(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        ref = _reference(rows, r["program"])
        if r["median_seconds"] < 0.8 * ref["median_seconds"]:
            assert r["estimate"] < ref["estimate"], f"{r['program']} {r['what']}"


def test_pairs_within_a_program_are_mostly_ordered(rows: list[dict[str, Any]]) -> None:
    """Of the pairs of one program measured more than 10% apart, the model orders most as measured."""
    agree = total = 0
    for a, b in itertools.combinations(rows, 2):
        if a["program"] != b["program"] or abs(a["median_seconds"] / b["median_seconds"] - 1) < 0.1:
            continue
        total += 1
        agree += (a["median_seconds"] < b["median_seconds"]) == (a["estimate"] < b["estimate"])
    assert total >= 8 and agree / total >= 0.8, (agree, total)


def test_held_out_error_is_bounded(rows: list[dict[str, Any]]) -> None:
    held = [abs(r["estimate"] / r["median_seconds"] - 1) for r in rows if r["program"] in HELD_OUT]
    assert statistics.median(held) <= 0.35
