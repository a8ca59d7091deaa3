"""The emitted Triton modules timed on a CUDA device beside the roofline model's estimate.

    python benchmarks/bench_gpu_kernels.py [--programs a,b] [--store NAME=STORE ...] [--top K]
                                           [--repeats N] [--json FILE] [--write]

Per built-in program: its reference (array calls: CuPy element-wise kernels and cuBLAS), each of
its experts and, given `--store NAME=STORE` (a finished `mugraph optimize NAME` run), the store's
chosen program, all emitted as `mugraph emit` emits them and timed by `mugraph.codegen.timing`
(fp16, CUDA events, L2 flushed, median of N). Beside each: the roofline estimate of the profile
named like the device (H100, H200), the model's error (estimate / measured - 1) and the measured
and estimated speedups over the reference. With `--top K` the store's K best-ranked μGraphs of its
first fragment are timed too, and Kendall's tau between the model's order and the measured one is
reported. Needs CuPy, Triton and a CUDA device; run it in a fresh process (Triton must not have
been imported with its interpreter on).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

from mugraph.arrays.backend import device_name, get_array_module
from mugraph.codegen import CodegenError, emit_module
from mugraph.codegen.timing import KernelTiming, time_source
from mugraph.ir.canonical import canonical_digest
from mugraph.programs import builtin_programs
from mugraph.run.kernels import Selection, select_from_program, select_from_store
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.profiles import GpuProfile, get_profile
from mugraph.stages.layout.roofline import estimate
from mugraph.storage.run.store import RunStore

RESULTS = Path(__file__).with_name("RESULTS.md")
BEGIN, END = "<!-- gpu_kernels -->", "<!-- gpu_kernels:end -->"


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b of two paired sequences (ties in either count as neither agreeing nor not)."""
    n = len(a)
    concordant = discordant = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    denom = ((concordant + discordant + ties_a) * (concordant + discordant + ties_b)) ** 0.5
    return (concordant - discordant) / denom if denom else 0.0


def _estimate(sel: Selection, profile: GpuProfile) -> float:
    """The roofline estimate under the layouts the module was emitted with."""
    layouts = sel.layouts if sel.layouts is not None else choose_layouts(sel.graph).layouts  # raises: none fits
    return estimate(sel.graph, layouts, profile).seconds


def _row(program: str, what: str, sel: Selection, profile: GpuProfile, repeats: int) -> dict[str, Any]:
    assert sel.reference is not None
    digest = sel.info.digest or canonical_digest(sel.graph)
    est = _estimate(sel, profile)
    try:
        timing: KernelTiming = time_source(emit_module(sel.graph, sel.info), sel.reference, repeats=repeats)
    except CodegenError as e:  # one module that fails does not stop the table
        return {"program": program, "what": what, "digest": digest, "error": str(e), "estimated_seconds": est}
    return {
        "program": program,
        "what": what,
        "digest": digest,
        **timing.as_dict(),
        "estimated_seconds": est,
        "model_error": est / timing.median_seconds - 1.0,
    }


def _profile_for(device: str) -> GpuProfile:
    for name in ("H200", "H100", "A100"):
        if name in device.upper():
            return get_profile(name)
    return get_profile("H100")


def run(
    programs: list[str],
    stores: dict[str, Path],
    top: int,
    repeats: int,
    top_programs: frozenset[str] = frozenset({"rms_norm"}),
) -> dict[str, Any]:
    xp = get_array_module("cupy")
    device = device_name(xp)
    profile = _profile_for(device)
    rows: list[dict[str, Any]] = []
    ranked: dict[str, list[dict[str, Any]]] = {}
    for name, prog in builtin_programs().items():
        if programs and name not in programs:
            continue
        ref = _row(name, "reference", select_from_program(name, None, "reference"), profile, repeats)
        rows.append(ref)
        for label in prog.experts:
            rows.append(_row(name, f"expert {label}", select_from_program(name, None, label), profile, repeats))
        if name in stores:
            with RunStore.open_existing(stores[name], readonly=True) as st:
                final = st.final()
            what = "chosen" if final is not None and final.get("complete") else "chosen (search stopped early)"
            rows.append(_row(name, what, select_from_store(stores[name], None), profile, repeats))
        for r in rows:
            if r["program"] == name:
                if "median_seconds" in r and "median_seconds" in ref:
                    r["speedup"] = ref["median_seconds"] / r["median_seconds"]
                r["estimated_speedup"] = ref["estimated_seconds"] / r["estimated_seconds"]
        print(json.dumps([r for r in rows if r["program"] == name]), file=sys.stderr, flush=True)
    for name, store in stores.items():
        if top <= 0 or name not in top_programs:
            continue
        with RunStore.open_existing(store, readonly=True) as st:
            order = [r for r in (st.ranking(0) or []) if not r.get("reference")][:top]
        top_rows = []
        for r in order:
            t = _row(name, "top", select_from_store(store, r["digest"]), profile, repeats)
            t["stored_estimate"] = r["estimated_seconds"]
            top_rows.append(t)
        ranked[name] = top_rows
    taus = {
        name: kendall_tau(
            [r["estimated_seconds"] for r in rs if "median_seconds" in r],
            [r["median_seconds"] for r in rs if "median_seconds" in r],
        )
        for name, rs in ranked.items()
    }
    return {
        "device": device,
        "profile": profile.name,
        "date": date.today().isoformat(),
        "python": platform.python_version(),
        "rows": rows,
        "top": ranked,
        "kendall_tau": taus,
    }


def table(result: dict[str, Any]) -> str:
    us = 1e6
    lines = [
        f"{result['device']} ({result['profile']} profile), {result['date']}: fp16, CUDA events, L2 flushed "
        "before each run, host launch hidden behind a spin kernel, median of "
        f"{result['rows'][0]['repeats'] if result['rows'] else '-'} runs.",
        "",
        "| program | μGraph | measured µs | min µs | host µs/run | estimate µs | model error | measured speedup "
        "| estimated speedup | max rel err |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        if "median_seconds" not in r:
            lines.append(
                f"| {r['program']} | {r['what']} | failed: {r['error'][:80]} | | | "
                f"{r['estimated_seconds'] * us:.1f} | | | {r['estimated_speedup']:.2f} | |"
            )
            continue
        lines.append(
            f"| {r['program']} | {r['what']} | {r['median_seconds'] * us:.1f} | {r['min_seconds'] * us:.1f} "
            f"| {r['host_seconds'] * us:.0f} | {r['estimated_seconds'] * us:.1f} | {r['model_error']:+.0%} "
            f"| {r.get('speedup', float('nan')):.2f} | {r['estimated_speedup']:.2f} "
            f"| {r['max_rel_err']:.1e} |"
        )
    for name, rs in result["top"].items():
        lines += [
            "",
            f"{name}: the store's top {len(rs)} by the model, timed (Kendall's tau of the two orders "
            f"{result['kendall_tau'][name]:+.2f}).",
            "",
            "| rank | digest | estimate µs | measured µs | model error |",
            "|---|---|---|---|---|",
        ]
        for i, r in enumerate(rs, 1):
            if "median_seconds" not in r:
                lines.append(f"| {i} | {r['digest'][:12]} | {r['estimated_seconds'] * us:.1f} | failed | |")
                continue
            lines.append(
                f"| {i} | {r['digest'][:12]} | {r['estimated_seconds'] * us:.1f} | "
                f"{r['median_seconds'] * us:.1f} | {r['model_error']:+.0%} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", default="", help="Comma-separated program names (default: all).")
    ap.add_argument(
        "--store",
        action="append",
        default=[],
        metavar="NAME=STORE",
        help="A finished optimize run of program NAME: time its chosen program (and its top K).",
    )
    ap.add_argument("--top", type=int, default=10, help="How many of each store's ranking to time.")
    ap.add_argument("--top-programs", default="rms_norm", help="Whose stores' top K to time (comma-separated).")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--json", type=Path, default=None, help="Also write the raw rows here.")
    ap.add_argument("--write", action="store_true", help="Replace the GPU kernel section of RESULTS.md.")
    args = ap.parse_args()
    stores = {k: Path(v) for k, v in (s.split("=", 1) for s in args.store)}
    result = run(
        [p for p in args.programs.split(",") if p],
        stores,
        args.top,
        args.repeats,
        frozenset(args.top_programs.split(",")),
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    text = table(result)
    print(text)
    if args.write:
        body = RESULTS.read_text()
        start, stop = body.index(BEGIN) + len(BEGIN), body.index(END)
        RESULTS.write_text(body[:start] + "\n" + text + "\n" + body[stop:])


if __name__ == "__main__":
    main()
