"""Fingerprint time of every expert μGraph and its reference, side by side, median of N runs.

    python benchmarks/bench_fingerprints.py [--repeat 5] [--backend numpy|cupy] [--write]
    python benchmarks/bench_fingerprints.py --side-by-side [--repeat 5] [--write]   (on a CUDA machine)

One "fingerprint" is one seed: random Z_pq inputs, the graph evaluated in the ring. The reference
and the expert are timed alternately in the same run, so their ratio holds on a noisy machine.
With --write the table replaces the fingerprint section of benchmarks/RESULTS.md. --side-by-side
times every graph on NumPy and on CuPy alternately in one run (the GPU's speedup per program) and
writes its own section.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from mugraph.arrays.backend import backend_name, device_name, get_array_module
from mugraph.ir.graph import KernelGraph
from mugraph.programs import builtin_programs
from mugraph.stages.verify.algebra import ZpqAlgebra
from mugraph.stages.verify.check import field_inputs
from mugraph.stages.verify.field import FieldSpec
from mugraph.stages.verify.interpret import evaluate

RESULTS = Path(__file__).with_name("RESULTS.md")
BEGIN, END = "<!-- fingerprints:begin -->", "<!-- fingerprints:end -->"
GPU_BEGIN, GPU_END = "<!-- fingerprints_gpu -->", "<!-- fingerprints_gpu:end -->"


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


def side_by_side(repeat: int) -> tuple[str, list[str]]:
    """Each graph's fingerprint on NumPy and on CuPy, alternately in one run."""
    import os

    cp = get_array_module("cupy")
    spec = FieldSpec()
    sync = cp.cuda.Stream.null.synchronize
    rows = []
    for name, prog in builtin_programs().items():
        ref = prog.reference()
        graphs = {"reference": ref} | {label: build() for label, build in prog.experts.items()}
        sides = []
        for xp in (np, cp):
            case = field_inputs(ref, spec, 0, xp)
            sides.append((ZpqAlgebra(xp, spec, case.omega), case.inputs, sync if xp is cp else None))
        for label, graph in graphs.items():
            for alg, inputs, s in sides:
                _time_eval(graph, alg, inputs, s)  # warm-up
            times: list[list[float]] = [[], []]
            for _ in range(repeat):
                for k, (alg, inputs, s) in enumerate(sides):
                    times[k].append(_time_eval(graph, alg, inputs, s))
            n, c = statistics.median(times[0]), statistics.median(times[1])
            rows.append(f"| {name} | {label} | {n * 1e3:.1f} | {c * 1e3:.2f} | {n / c:.1f} |")
    header = (
        f"NumPy ({os.cpu_count()} cores) and CuPy on {device_name(cp)}, "
        f"alternately in one run; p=227 q=113, one seed per fingerprint, median of {repeat}; numpy {np.__version__}, "
        f"cupy {cp.__version__}.\n\n"
        "| program | graph | NumPy ms | CuPy ms | CuPy speedup |\n|---|---|---|---|---|"
    )
    return header, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="numpy", choices=["numpy", "cupy"])
    ap.add_argument("--side-by-side", action="store_true", help="NumPy against CuPy in one run (needs a GPU)")
    ap.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = ap.parse_args()
    header, rows = side_by_side(args.repeat) if args.side_by_side else run(args.repeat, args.backend)
    table = "\n".join([header, *rows])
    print(table)
    if args.write:
        text = RESULTS.read_text()
        begin, end = (GPU_BEGIN, GPU_END) if args.side_by_side else (BEGIN, END)
        start, stop = text.index(begin) + len(begin), text.index(end)
        RESULTS.write_text(text[:start] + "\n" + table + "\n" + text[stop:])


if __name__ == "__main__":
    main()
