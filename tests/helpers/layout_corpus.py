"""The confirmed μGraphs of the benchmarks (tests/stages/layout/data/mugraphs.jsonl, made by
scripts/collect_mugraphs.py from run stores, a gqa subtree search, and the built-in programs)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import loads

DATA = Path(__file__).resolve().parents[1] / "stages" / "layout" / "data" / "mugraphs.jsonl"


@cache
def corpus() -> tuple[tuple[str, str, str, str], ...]:
    """(program, source, digest, graph JSON) of every collected μGraph."""
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    return tuple((r["program"], r["source"], r["digest"], r["graph"]) for r in rows)


def graph(text: str) -> KernelGraph:
    return loads(text)
