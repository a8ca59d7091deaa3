"""Search benchmark: each benchmark program with its preset, run as `mugraph search` in a child
process (so its peak resident memory is its own), full or up to a time limit.

Per program: nodes explored, nodes/s (one core), solver calls, fingerprints, μGraphs found, expert
found or not, wall time, peak RSS, and the verdict memo's hit rates on the search's own query
stream (per-process LRU, then the private Redis). Each program runs twice against one private
Redis: the first run is cold, the second finds every verdict in Redis.

    python benchmarks/bench_search.py                     # full presets, 10 minutes each at most
    python benchmarks/bench_search.py --narrow --write    # the test suite's narrowed limits
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.narrow import NARROW

PROGRAMS = ["rms_norm", "lora", "gated_mlp", "gqa"]
MIRAGE_8_THREADS = {"rms_norm": 25, "lora": 213, "gqa": 111, "gated_mlp": 38}  # CMU 15-618, seconds


def run_search(name: str, memo_dir: Path, narrow: bool, time_limit: str | None) -> dict[str, Any]:
    args = [sys.executable, "-m", "mugraph.cli", "search", name, "--json", "--memo-dir", str(memo_dir)]
    if narrow:
        for key, value in NARROW[name].items():
            args += ["--set", f"{key}={json.dumps(value)}"]
    if time_limit:
        args += ["--time-limit", time_limit]
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"mugraph search {name} failed with status {status}")
    summary: dict[str, Any] = json.loads(out.splitlines()[-1])
    summary["wall"] = wall
    summary["peak_rss_mib"] = usage.ru_maxrss / 1024  # Linux reports KiB
    return summary


def row(name: str, cold: dict[str, Any], warm: dict[str, Any] | None) -> str:
    c, m = cold["counters"], cold["memo_counters"]
    asked = c["memo_hits"] + c["solver_calls"]
    oracle_hits = 100 * c["memo_hits"] / asked if asked else 0.0
    lookups = m["lookups"] or 1
    local = 100 * m["local_hits"] / lookups
    if warm is None:
        warm_text = "not run"
    else:
        warm_remote = 100 * warm["memo_counters"]["remote_hits"] / (warm["memo_counters"]["lookups"] or 1)
        warm_text = f"{warm['wall']:.0f} s ({warm['solver_calls']} calls, {warm_remote:.0f}% Redis)"
    rate = c["nodes"] / cold["seconds"] if cold["seconds"] else 0.0
    done = "yes" if cold["complete"] else f"no ({cold['frontier']} subtrees left)"
    return (
        f"| {name} | {c['nodes']:,} | {rate:,.0f} | {c['oracle_queries']:,} | {c['prefiltered']:,} | "
        f"{oracle_hits:.1f}% | {local:.1f}% | {c['solver_calls']:,} ({c['solver_seconds']:.0f} s) | "
        f"{c['fingerprints']:,} ({c['fingerprint_seconds']:.0f} s) | {cold['mugraphs']} | "
        f"{'yes' if cold['expert_found'] else 'no'} | {done} | {cold['wall']:.0f} s | "
        f"{warm_text} | "
        f"{cold['peak_rss_mib']:.0f} MiB | {MIRAGE_8_THREADS[name]} s |"
    )


HEADER = (
    "| program | nodes | nodes/s | oracle queries | answered without Z3 | oracle memo hits | of those, LRU | "
    "solver calls | fingerprints | μGraphs | expert found | finished | wall (cold) | wall (warm memo) | "
    "peak RSS | Mirage C++, 8 threads |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="*", default=PROGRAMS)
    ap.add_argument("--narrow", action="store_true", help="the test suite's narrowed limits")
    ap.add_argument("--time-limit", default="10m", help="per search (default 10m; 'none' for no limit)")
    ap.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    ap.add_argument("--no-warm", action="store_true", help="skip the second run on the warm memo")
    ap.add_argument("--marker", default=None, help="RESULTS.md section (default: search-narrow or search-full)")
    args = ap.parse_args()
    limit = None if args.time_limit == "none" else args.time_limit
    lines = [HEADER]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.programs:
            memo = Path(tmp) / f"memo-{name}"
            cold = run_search(name, memo, args.narrow, limit)
            warm = None if args.no_warm else run_search(name, memo, args.narrow, limit)
            lines.append(row(name, cold, warm))
            print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    if args.write:
        marker = args.marker or ("search-narrow" if args.narrow else "search-full")
        write_results(marker, table)


def write_results(marker: str, table: str) -> None:
    path = Path(__file__).with_name("RESULTS.md")
    text = path.read_text()
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    if start not in text:
        text += f"\n{start}\n{end}\n"
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{table}\n{end}{tail}")


if __name__ == "__main__":
    main()
