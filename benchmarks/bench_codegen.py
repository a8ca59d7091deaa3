"""Emitted Triton modules in Triton's interpreter on the CPU, per benchmark program: the reference
program, each expert, and the μGraph the roofline model ranks first on H100 among the confirmed
μGraphs of tests/stages/layout/data (the one `optimize` would emit), at the benchmark shapes.

    python benchmarks/bench_codegen.py [--programs rms_norm,lora] [--write]

Per module: Triton kernels, array calls, block-program runs (sum over kernels of grid blocks x
for-loop iterations: what the interpreter steps through one at a time), seconds of one `run()` in
the interpreter (inputs ready, module imported), and the max relative error against the float64
reference. CPU interpreter times say nothing about a GPU: they are what a check costs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from math import prod
from pathlib import Path
from typing import Any

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is first imported

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mugraph.codegen import FP16_TOLERANCE, EmitInfo, check_source, emit_module  # noqa: E402
from mugraph.ir.canonical import canonical_digest  # noqa: E402
from mugraph.ir.graph import KernelGraph  # noqa: E402
from mugraph.ir.serialize import loads  # noqa: E402
from mugraph.ir.types import OpKind  # noqa: E402
from mugraph.programs import builtin_programs  # noqa: E402
from mugraph.stages.fragments import split_program  # noqa: E402
from mugraph.stages.layout.choose import choose_layouts  # noqa: E402
from mugraph.stages.layout.profiles import get_profile  # noqa: E402
from mugraph.stages.layout.rank import rank  # noqa: E402

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
CORPUS = ROOT / "tests" / "stages" / "layout" / "data" / "mugraphs.jsonl"
BEGIN, END = "<!-- codegen:begin -->", "<!-- codegen:end -->"


def _best(name: str, reference: KernelGraph) -> tuple[str, KernelGraph, KernelGraph] | None:
    """The H100 roofline's rank-1 μGraph among the corpus's confirmed μGraphs of `name` (collected
    whole, or as its one fragment f0, whose outputs are named o0...), with the reference to check it by."""
    split = split_program(reference)
    graphs: dict[str, tuple[KernelGraph, KernelGraph]] = {}
    for line in CORPUS.read_text().splitlines():
        r = json.loads(line)
        if r["program"] != name or r["source"] == "reference":
            continue
        if r["fragment"] == name:
            graphs[r["digest"]] = (loads(r["graph"]), reference)
        elif len(split.fragments) == 1 and r["fragment"] == split.fragments[0].name:
            graphs[r["digest"]] = (loads(r["graph"]), split.fragments[0].graph)
    if not graphs:
        return None
    solved = {d: (g, choose_layouts(g)) for d, (g, _) in sorted(graphs.items())}
    rows, _ = rank(solved, (reference, choose_layouts(reference)), get_profile("H100"))
    best = rows[0]["digest"]
    return best, graphs[best][0], graphs[best][1]


def _shape(graph: KernelGraph) -> dict[str, int]:
    custom = [op.block for op in graph.ops if op.kind is OpKind.CUSTOMIZED and op.block is not None]
    calls = sum(1 for op in graph.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT, OpKind.CUSTOMIZED))
    return {"kernels": len(custom), "calls": calls, "block_runs": sum(prod(b.grid) * b.forloop for b in custom)}


def run(names: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for name, prog in builtin_programs().items():
        if names and name not in names:
            continue
        reference = prog.reference()
        modules: list[tuple[str, KernelGraph, KernelGraph]] = [("reference", reference, reference)]
        modules += [(f"expert {label}", b(), reference) for label, b in prog.experts.items()]
        best = _best(name, reference)
        if best is not None:
            digest, graph, against = best
            experts = {canonical_digest(g) for _, g, _ in modules[1:]}
            modules.append((f"best on H100{' (an expert)' if digest in experts else ''}", graph, against))
        for label, graph, against in modules:
            chosen = choose_layouts(graph).layouts  # as `mugraph emit` lays out device tensors
            report = check_source(emit_module(graph, EmitInfo(name, label, inner=chosen.kernel)), against)
            row = {
                "module": label,
                "digest": canonical_digest(graph)[:16],
                **_shape(graph),
                "seconds": report.seconds,
                "max_rel_err": report.max_rel_err,
                "ok": report.ok,
            }
            out[name].append(row)
            print(json.dumps({name: row}), flush=True)
    return out


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "### Emitted Triton modules in Triton's interpreter (CPU)",
        "",
        "`python benchmarks/bench_codegen.py --write`: each module from `mugraph.codegen` at the benchmark "
        "shapes, run once by `run()` under TRITON_INTERPRET=1 on NumPy fp16 arrays (inputs uniform in "
        "[-0.1, 0.1)), compared with the float64 interpreter of the reference program. Block runs = sum over "
        "kernels of blocks x for-loop iterations, which the interpreter executes one after another; array "
        f"calls are NumPy (float32 compute, fp16 storage). Tolerance {FP16_TOLERANCE:g} of each output's "
        "largest magnitude. One machine, 2 cores shared with other work: the seconds are indicative.",
        "",
        "| program | module | μGraph | Triton kernels | array calls | block runs | interpreter (s) | max rel err | "
        "matches |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        for r in rows:
            lines.append(
                f"| {name} | {r['module']} | {r['digest']} | {r['kernels']} | {r['calls']} | "
                f"{r['block_runs']:,} | {r['seconds']:.2f} | {r['max_rel_err']:.1e} | "
                f"{'yes' if r['ok'] else 'NO'} |"
            )
    lines += ["", 'Compiled natively and timed on a GPU: see "Emitted modules on a GPU" below.']
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", default="", help="Comma-separated program names (default: all).")
    ap.add_argument("--write", action="store_true", help="Replace the codegen section of RESULTS.md.")
    args = ap.parse_args()
    text = table(run([n for n in args.programs.split(",") if n]))
    print(text)
    if args.write:
        old = RESULTS.read_text()
        if BEGIN in old:
            new = old[: old.index(BEGIN) + len(BEGIN)] + "\n" + text + "\n" + old[old.index(END) :]
        else:
            new = old.rstrip() + f"\n\n{BEGIN}\n{text}\n{END}\n"
        RESULTS.write_text(new)


if __name__ == "__main__":
    main()
