"""Block-input rules side by side: the same serial search under each `block_inputs` setting.

Per program (whole default spaces of rms_norm and gated_mlp, lora narrowed as in the test suite),
each rule runs in this process with a cold verdict memo; the rules alternate their order between
repeats. Reported: states, seconds, solver calls, confirmed μGraphs, those with a block input no
block op reads, and whether the new set holds every old μGraph without an unread input.

    python benchmarks/bench_block_inputs.py --rules mirage subsets --repeats 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mugraph.programs import get_builtin
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.serial import run_search
from tests.helpers.narrow import NARROW
from tests.helpers.unread import unread_block_inputs

SPACES = {"rms_norm": False, "gated_mlp": False, "lora": True}  # name: narrowed


def one(name: str, rule: str) -> dict[str, Any]:
    prog = get_builtin(name)
    overrides: dict[str, Any] = {**(NARROW[name] if SPACES[name] else {}), "block_inputs": rule}
    config = preset_config(prog.preset).with_overrides(overrides)
    report = run_search(Searcher(Fragment(prog.reference(), config, name)))
    assert report.complete
    unread = sorted(d for d, f in report.found.items() if unread_block_inputs(f.kernel_graph()))
    return {
        "program": name,
        "rule": rule,
        "states": report.counters.nodes,
        "seconds": round(report.seconds, 2),
        "solver_calls": report.counters.solver_calls,
        "mugraphs": len(report.found),
        "unread": len(unread),
        "digests": sorted(report.found),
        "unread_digests": unread,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", nargs="+", default=list(SPACES))
    ap.add_argument("--rules", nargs="+", default=["mirage", "subsets"])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for rep in range(args.repeats):
        for name in args.programs:
            rules = args.rules if rep % 2 == 0 else list(reversed(args.rules))
            for rule in rules:
                row = one(name, rule)
                rows.append({**row, "repeat": rep})
                print(json.dumps({k: v for k, v in row.items() if "digests" not in k}), flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    for name in args.programs:
        got = {r["rule"]: r for r in rows if r["program"] == name and r["repeat"] == 0}
        if "mirage" in got:
            old = set(got["mirage"]["digests"]) - set(got["mirage"]["unread_digests"])
            for rule, r in got.items():
                print(name, rule, "holds old-minus-unread:", old <= set(r["digests"]), flush=True)


if __name__ == "__main__":
    main()
