"""Peak memory and time of the confirm stage on a llama-7B-sized MLP, its inputs held between
μGraphs (as before) or drawn again for each (`confirm.HOLD_INPUT_BYTES`), side by side.

    python benchmarks/bench_verify_memory.py [--hidden 4096] [--ffn 11008] [--rows 64]

Each case runs in a fresh process (peak = VmHWM growth from before the Confirmer is built): build
the Confirmer of the fragment, confirm a block-graph μGraph of it twice (the second finds its values
in the caches) and the reference once. The fragments are those mugraph.optimize makes of the MLP:
f0 = silu(X·WG)·(X·WU), f1 = M·WD, and the whole MLP. Prints each case's peak, times and the ratios;
the verdicts of both ways must be equal (the script fails otherwise).

Measured on the 2-core VM, 7B sizes, 2026-12-02 (one run each, under other load):
  f0:  peak 2986 MB held, 899 MB drawn (3.32x less); a confirmation 3.7 s -> 9.9 s (first), 0.01 -> 4.2 s (second)
  f1:  peak 1430 MB held, 376 MB drawn (3.80x less); a confirmation 3.1 s -> 5.2 s
  mlp: peak 4357 MB held, 1246 MB drawn (3.50x less); a confirmation 3.5 s -> 17.2 s
A whole `mugraph.optimize` of the 7B MLP module (fp16, x [64, 4096], time_limit=120, workers=2;
psutil every 0.2 s), the commit before beside it: largest worker 5,833 MB -> 2,002 MB, all processes
9,163 MB -> 5,299 MB, 163 s -> 203 s wall.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

CASE = """
import json, sys, time
from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.stages.verify import confirm

NONE = (-1, -1, -1)
what, hold, h, f, b = sys.argv[1], sys.argv[2] == "held", *map(int, sys.argv[3:6])

def status(key):
    return next(int(s.split()[1]) * 1024 for s in open("/proc/self/status") if s.startswith(key + ":"))

def gated(g, x, wg, wu, grid):
    if grid is None:
        return g.mul(g.silu(g.matmul(x, wg)), g.matmul(x, wu))
    bg = BlockGraph(grid=(grid, 1, 1), forloop=64)
    xi = bg.new_input(x, NONE, fmap=1)
    w1, w2 = bg.new_input(wg, (1, -1, -1), fmap=0), bg.new_input(wu, (1, -1, -1), fmap=0)
    bg.new_output(bg.mul(bg.silu(bg.accum_no_red(bg.matmul(xi, w1))), bg.accum_no_red(bg.matmul(xi, w2))), (1, -1, -1))
    return g.customized(bg)[0]

def graph(grid):
    g = KernelGraph()
    if what == "f1":
        m = g.new_input((b, f), name="M")
        g.mark_output(g.matmul(m, g.new_input((f, h), name="WD")), "O")
        return g
    x, wg, wu = g.new_input((b, h), name="X"), g.new_input((h, f), name="WG"), g.new_input((h, f), name="WU")
    out = gated(g, x, wg, wu, grid)
    g.mark_output(out if what == "f0" else g.matmul(out, g.new_input((f, h), name="WD")), "O")
    return g

if hold:
    confirm.HOLD_INPUT_BYTES = 1 << 50
reference, candidate = graph(None), graph(f // 64)
before = status("VmHWM")
t0 = time.perf_counter()
c = confirm.Confirmer(reference, what)
t1 = time.perf_counter()
verdicts, seconds = [], []
for g in (candidate, candidate, reference):
    t = time.perf_counter()
    v = c.confirm(g)
    seconds.append(round(time.perf_counter() - t, 2))
    verdicts.append([v["equivalent"], v["float_max_rel_err"], v["reason"], v["seeds"]])
print(json.dumps({"holds": c.holds, "peak_mb": (status("VmHWM") - before) >> 20, "build_s": round(t1 - t0, 2),
                  "confirm_s": seconds, "verdicts": verdicts}))
"""


def run_case(what: str, how: str, sizes: tuple[int, int, int]) -> dict[str, object]:
    args = [sys.executable, "-c", textwrap.dedent(CASE), what, how, *map(str, sizes)]
    return dict(json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--cases", default="f0,f1,mlp")
    a = ap.parse_args()
    sizes = (a.hidden, a.ffn, a.rows)
    print(f"MLP hidden {a.hidden}, ffn {a.ffn}, rows {a.rows}")
    for what in a.cases.split(","):
        held, drawn = run_case(what, "held", sizes), run_case(what, "default", sizes)
        if held["verdicts"] != drawn["verdicts"]:
            raise SystemExit(f"{what}: verdicts differ: {held['verdicts']} vs {drawn['verdicts']}")
        hp, dp = int(str(held["peak_mb"])), int(str(drawn["peak_mb"]))
        print(
            f"{what:>4}: held peak {hp} MB, default ({'held' if drawn['holds'] else 'drawn'}) {dp} MB: "
            f"{hp / max(dp, 1):.2f}x less; build {held['build_s']} -> {drawn['build_s']} s; "
            f"confirm {held['confirm_s']} -> {drawn['confirm_s']} s; verdicts equal"
        )


if __name__ == "__main__":
    main()
