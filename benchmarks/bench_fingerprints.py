"""Fingerprint time of every expert μGraph and its reference, side by side, median of N runs.

    python benchmarks/bench_fingerprints.py [--repeat 5] [--backend numpy|cupy] [--write]

One "fingerprint" is one seed: random Z_pq inputs, the graph evaluated in the ring. The reference
and the expert are timed alternately in the same run, so their ratio holds on a noisy machine.
With --write the table replaces the fingerprint section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from mugraph.cuda.backend import backend_name, get_array_module
from mugraph.ir.graph import KernelGraph
from mugraph.programs import builtin_programs
from mugraph.stages.verify.algebra import ZpqAlgebra
from mugraph.stages.verify.check import field_inputs
from mugraph.stages.verify.field import FieldSpec
from mugraph.stages.verify.interpret import evaluate

RESULTS = Path(__file__).with_name("RESULTS.md")
BEGIN, END = "<!-- fingerprints:begin -->", "<!-- fingerprints:end -->"


def _time_eval(graph: KernelGraph, alg: ZpqAlgebra, inputs: tuple[object, ...], sync: object) -> float:
    t0 = time.perf_counter()
    outs = evaluate(alg, graph, inputs)
    if callable(sync):
        sync()
    del outs
    return time.perf_counter() - t0


def run(repeat: int, backend: str) -> tuple[str, list[str]]:
    xp = get_array_module(backend)
    spec = FieldSpec()
    sync = None
    if backend_name(xp) == "cupy":
        sync = xp.cuda.Stream.null.synchronize
    rows = []
    for name, prog in builtin_programs().items():
        ref = prog.reference()
        case = field_inputs(ref, spec, 0, xp)
        alg = ZpqAlgebra(xp, spec, case.omega)
        for label, build in prog.experts.items():
            expert = build()
            _time_eval(expert, alg, case.inputs, sync)  # warm-up (tables, BLAS, CuPy kernels)
            r_times, e_times = [], []
            for _ in range(repeat):
                r_times.append(_time_eval(ref, alg, case.inputs, sync))
                e_times.append(_time_eval(expert, alg, case.inputs, sync))
            r, e = statistics.median(r_times), statistics.median(e_times)
            blocks = [op.block for op in expert.ops if op.block is not None]
            grids = " + ".join("x".join(map(str, b.grid)) + f"/F{b.forloop}" for b in blocks)
            rows.append(f"| {name} | {label} | {grids} | {r * 1e3:.1f} | {e * 1e3:.1f} | {e / r:.2f} |")
    header = (
        f"Backend {backend_name(xp)}, p=227 q=113, one seed per fingerprint, median of {repeat}; "
        f"{platform.machine()}, {platform.python_version()}, numpy {np.__version__}.\n\n"
        "| program | expert | grid/for-loop | reference ms | expert ms | expert/reference |\n"
        "|---|---|---|---|---|---|"
    )
    return header, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="numpy", choices=["numpy", "cupy"])
    ap.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = ap.parse_args()
    header, rows = run(args.repeat, args.backend)
    table = "\n".join([header, *rows])
    print(table)
    if args.write:
        text = RESULTS.read_text()
        start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
        RESULTS.write_text(text[:start] + "\n" + table + "\n" + text[stop:])


if __name__ == "__main__":
    main()
