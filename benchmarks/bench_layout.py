"""Layout selection and ranking, per benchmark: layout solve time per μGraph (median, max) and the
estimated speedup of the chosen μGraph over the reference program on every GPU profile; with a GPU
(CuPy), the reference and the chosen μGraph are also timed in fp16 and set beside the estimate.

    python benchmarks/bench_layout.py [--corpus FILE] [--write]

The μGraphs are the collected confirmed μGraphs of the benchmarks (tests/stages/layout/data, made
by scripts/collect_mugraphs.py) plus each program's experts. All figures come from one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from mugraph.arrays.backend import cupy_available, get_array_module
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import loads
from mugraph.programs import builtin_programs
from mugraph.stages.layout.choose import LayoutResult, choose_layouts
from mugraph.stages.layout.measure import measure
from mugraph.stages.layout.profiles import PROFILES
from mugraph.stages.layout.rank import rank

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
CORPUS = ROOT / "tests" / "stages" / "layout" / "data" / "mugraphs.jsonl"
BEGIN, END = "<!-- layout:begin -->", "<!-- layout:end -->"


def run(corpus: Path, gpu: bool) -> dict[str, Any]:
    by_program: dict[str, dict[str, tuple[KernelGraph, str]]] = defaultdict(dict)
    for line in corpus.read_text().splitlines():
        r = json.loads(line)
        if r["source"] != "reference":
            by_program[r["program"]][r["digest"]] = (loads(r["graph"]), r["source"])
    out: dict[str, Any] = {}
    xp = get_array_module("cupy") if gpu else None
    for name, prog in builtin_programs().items():
        if not prog.experts or name not in by_program:
            continue
        solved: dict[str, tuple[KernelGraph, LayoutResult]] = {}
        for d, (g, _) in sorted(by_program[name].items()):
            solved[d] = (g, choose_layouts(g))
        times = [lay.solve_seconds for _, lay in solved.values()]
        ref = prog.reference()
        ref_lay = choose_layouts(ref)
        expert = canonical_digest(next(iter(prog.experts.values()))())
        row: dict[str, Any] = {
            "mugraphs": len(solved),
            "solve_median_ms": 1e3 * statistics.median(times),
            "solve_max_ms": 1e3 * max(times),
            "profiles": {},
        }
        for pname, profile in PROFILES.items():
            rows, ref_row = rank(solved, (ref, ref_lay), profile)
            ex = next(r for r in rows if r["digest"] == expert)
            row["profiles"][pname] = {
                "best": rows[0]["digest"],
                "best_is_expert": rows[0]["digest"] == expert,
                "best_speedup": rows[0]["speedup"],
                "expert_speedup": ex["speedup"],
                "expert_rank": rows.index(ex) + 1,
                "ref_us": 1e6 * ref_row["estimated_seconds"],
                "best_us": 1e6 * rows[0]["estimated_seconds"],
                "best_bound": rows[0]["bound"],
            }
        if xp is not None:
            best = row["profiles"]["H100"]["best"]
            m_ref, m_best = measure(ref, xp), measure(solved[best][0], xp)
            row["measured"] = {
                "device": m_ref.device,
                "ref_us": 1e6 * m_ref.median_seconds,
                "best_us": 1e6 * m_best.median_seconds,
                "speedup": m_ref.median_seconds / m_best.median_seconds,
            }
        out[name] = row
        print(json.dumps({name: row}), flush=True)
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        "### Layout selection and ranking (issue 6)",
        "",
        "`python benchmarks/bench_layout.py --write`: the confirmed μGraphs of tests/stages/layout/data plus "
        "the experts, layouts by z3.Optimize, ranked by the roofline model (roofline-v1). Speedup = estimated "
        "time of the reference program / estimated time of the chosen (rank 1) μGraph.",
        "",
        "| program | μGraphs | layout solve median / max (ms) | "
        + " | ".join(f"{p}: ref → best (speedup, bound)" for p in PROFILES)
        + " | expert's rank (A100/H100/H200) |",
        "|---|---|---|" + "---|" * len(PROFILES) + "---|",
    ]
    for name, r in results.items():
        cells = []
        for p in PROFILES:
            x = r["profiles"][p]
            cells.append(f"{x['ref_us']:.1f} → {x['best_us']:.1f} μs ({x['best_speedup']:.2f}x, {x['best_bound']})")
        ranks = "/".join(str(r["profiles"][p]["expert_rank"]) for p in PROFILES)
        lines.append(
            f"| {name} | {r['mugraphs']} | {r['solve_median_ms']:.0f} / {r['solve_max_ms']:.0f} | "
            + " | ".join(cells)
            + f" | {ranks} |"
        )
    lines += [
        "",
        "Every expert ranks above its reference program on every profile (the test suite asserts it). The "
        "model is conservative next to Mirage's measured speedups (RMSNorm+Linear 1.5x A100 / 1.9x H100, "
        "GatedMLP 1.5x A100 / 2.7-3.3x H100): at these decoding shapes the fused kernel and the "
        "reference both stream the same weights from DRAM, so the model credits fusion only with the "
        "launches and intermediate tensors it removes. Where μGraphs tie on the bound term, the one "
        "with less traffic elsewhere ranks first; Mirage's rms_norm expert (grid 64, fewer blocks than "
        "SMs) ties in estimated time with the winner and ranks behind it on that second key.",
    ]
    measured = {n: r["measured"] for n, r in results.items() if "measured" in r}
    lines.append("")
    if measured:
        lines += [
            "Measured in fp16 with CuPy (kernel ops and block graphs as CuPy operations, median of 20):",
            "",
            "| program | device | reference (μs) | best (μs) | measured speedup | estimated speedup (H100) |",
            "|---|---|---|---|---|---|",
        ]
        for n, m in measured.items():
            est = results[n]["profiles"]["H100"]["best_speedup"]
            lines.append(
                f"| {n} | {m['device']} | {m['ref_us']:.1f} | {m['best_us']:.1f} | {m['speedup']:.2f}x | {est:.2f}x |"
            )
    else:
        lines.append(
            "No GPU was available to this run, so nothing was measured here; the emitted kernels were timed "
            'on an H100 beside the model\'s estimates (see "On a GPU" below).'
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--no-gpu", action="store_true", help="Do not measure even where CuPy finds a GPU.")
    ap.add_argument("--write", action="store_true", help="Replace the layout section of RESULTS.md.")
    args = ap.parse_args()
    text = table(run(args.corpus, cupy_available() and not args.no_gpu))
    print(text)
    if args.write:
        old = RESULTS.read_text()
        if BEGIN in old:
            start, stop = old.index(BEGIN) + len(BEGIN), old.index(END)
            new = old[:start] + "\n" + text + "\n" + old[stop:]
        else:
            mark = "<!-- bench_pipeline -->"
            new = (
                old.replace(mark, f"{BEGIN}\n{text}\n{END}\n\n{mark}")
                if mark in old
                else old.rstrip() + f"\n\n{BEGIN}\n{text}\n{END}\n"
            )
        RESULTS.write_text(new)


if __name__ == "__main__":
    main()
