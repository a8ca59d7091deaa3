"""PyTorch models as users write them, through `mugraph.optimize`, beside the built-in programs.

Each case runs in a child process of its own (Triton's interpreter is chosen per process): the model
is optimized on a local cluster of `--workers` workers under `--time-limit`, in a fresh store, and the
returned module is run on fresh inputs and compared with the model (relative error, max over outputs).
A built-in case (`builtin:NAME`) runs `mugraph optimize NAME` the same way, so that a torch spelling of
a built-in program is timed side by side with it. One JSON line per case on stdout; `--table` prints
them as a Markdown table for RESULTS.md.

`--device cuda` puts each model and its inputs on the GPU (the kernels compiled by Triton) and times
the module against the model: CUDA events around each call, in alternating rounds, the median; once
as called from Python (`eager`, launches included), once replayed as a CUDA graph (`graph`, the GPU's
time alone). A store left in `--scratch` by an earlier run of the same case is reused, not searched.

    python benchmarks/bench_torch_models.py --cases builtin:rms_norm readme_rms_norm
    python benchmarks/bench_torch_models.py --cases prenorm_mlp_fp16 prenorm_mlp_fp32 --time-limit 10m
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CASES = [
    "builtin:rms_norm",
    "readme_rms_norm",
    "prenorm_mlp_fp16",
    "prenorm_mlp_fp32",
    "prenorm_mlp_fp16_3d",
    "prenorm_mlp_fp32_3d",
    "prenorm_gelu_mlp_fp16",
    "llama_half_block",
    "prenorm_mlp_bf16",
]

# Runs in the child: builds the case's model, optimizes it, checks the module against the model.
CHILD = r'''
import json, sys, time
import mugraph  # before transformers: Triton's interpreter is chosen when mugraph.torch is imported
import mugraph.torch
import torch
import torch.nn.functional as F
from torch import nn

case, store, workers, limit, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] or None, sys.argv[5]
profile_calls = sys.argv[6] == "1"
no_dashboard = sys.argv[7] == "1"
torch.manual_seed(0)


def median_ms(fns, x, rounds=5, reps=20):
    """Per function, the median of CUDA-event times of single calls, rounds alternating between them."""
    times = [[] for _ in fns]
    with torch.no_grad():
        for f in fns:
            for _ in range(3):
                f(x)
        torch.cuda.synchronize()
        for _ in range(rounds):
            for k, f in enumerate(fns):
                for _ in range(reps):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record(); f(x); b.record(); b.synchronize()
                    times[k].append(a.elapsed_time(b))
    return [sorted(t)[len(t) // 2] for t in times]


def graphed(f, x):
    """`f` at `x` captured as a CUDA graph, and the call that replays it (None where capture fails)."""
    try:
        with torch.no_grad():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    f(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                f(x)
        return lambda _x: g.replay()
    except Exception as e:
        print("graph capture failed:", repr(e)[:300], file=sys.stderr)
        return None


class ReadmeRMSNorm(nn.Module):
    """README's rms_norm program written in torch: F.rms_norm with eps, then a matmul."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4096, 6144) / 64)

    def forward(self, x):
        return F.rms_norm(x, (4096,), eps=1e-6) @ self.w


class PreNormMLP(nn.Module):
    """RMSNorm with weight, Linear, SiLU or GELU, Linear, residual."""

    def __init__(self, d=256, f=1024, act="silu"):
        super().__init__()
        self.norm = nn.RMSNorm(d, eps=1e-5)
        self.fc1, self.fc2 = nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)
        self.act = F.silu if act == "silu" else F.gelu

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def llama_half_block():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_hidden_layers=1)

    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.mlp = LlamaRMSNorm(256, eps=cfg.rms_norm_eps), LlamaMLP(cfg)

        def forward(self, x):
            return x + self.mlp(self.norm(x))

    return Half()


def build(case):
    fp16, fp32 = torch.float16, torch.float32
    if case == "readme_rms_norm":
        return ReadmeRMSNorm().to(fp16), (16, 4096), fp16
    if case == "llama_half_block":
        return llama_half_block().to(fp16), (16, 256), fp16
    act = "gelu" if "gelu" in case else "silu"
    dtype = fp32 if "fp32" in case else torch.bfloat16 if "bf16" in case else fp16
    shape = (2, 8, 256) if case.endswith("_3d") else (16, 256)
    return PreNormMLP(act=act).to(dtype), shape, dtype


t0 = time.perf_counter()
if case.startswith("builtin:"):
    from mugraph.api import OptimizeOptions, run_optimize

    done = run_optimize(case.split(":", 1)[1], OptimizeOptions(store=store, workers=workers, time_limit=limit))
    frags = []
    for name, best in done["best_per_fragment"].items():
        rows = [r for r in done["ranking"][name] if r["digest"] == best]
        speed = rows[0]["speedup"] if rows else 1.0
        ranked = len(done["ranking"][name])
        frags.append({"name": name, "chosen": best[:16], "speedup": round(speed, 3), "ranked": ranked})
    out = {"fragments": frags, "complete": done["complete"], "mugraphs": len(done["mugraphs"]),
           "states": done["states"], "solver_calls": done["solver_calls"], "rel_error": None}
else:
    model, shape, dtype = build(case)
    model = model.eval().to(device)
    x = torch.randn(*shape, dtype=dtype).to(device)
    t_opt = time.perf_counter()
    dash = {"dashboard_address": None} if no_dashboard else {}
    fast = mugraph.optimize(model, (x,), store=store, workers=workers, time_limit=limit, verbose=False, **dash)
    optimize_s = time.perf_counter() - t_opt
    v = fast.verdict
    x2 = torch.randn(*shape, dtype=dtype).to(device)
    timing = None
    if device == "cuda":
        eager = median_ms([model, fast], x2)
        gm, gf = graphed(model, x2), graphed(fast, x2)
        graph = median_ms([gm, gf], x2) if gm and gf else [None, None]
        timing = {"model_ms": eager[0], "module_ms": eager[1], "model_graph_ms": graph[0], "module_graph_ms": graph[1]}
        if profile_calls:  # the GPU's kernels in ten calls of each, on stderr
            from torch.profiler import ProfilerActivity, profile

            for label, f in (("model", model), ("module", fast)):
                with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        f(x2)
                    torch.cuda.synchronize()
                table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=10)
                print(f"== {case} {label}\n{table}", file=sys.stderr)
    with torch.no_grad():
        got = mugraph.load(store).to(device)(x2).double()
        want = model.double()(x2.double())
    err = float((got - want).abs().max() / want.abs().max())
    out = {
        "fragments": [
            {"name": f.name, "chosen": f.chosen[:16], "speedup": round(f.speedup, 3), "kernels": f.kernels,
             "ranked": f.ranked, "reason": f.reason}
            for f in v.fragments
        ],
        "complete": v.complete,
        "self_check": v.self_check,
        "measured": None if v.measured is None else [v.measured.module_seconds, v.measured.model_seconds],
        "optimize_s": round(optimize_s, 2),
        "timing": timing,
        "heavy_glue": list(v.heavy_glue),
        "rel_error": err,
        "dtype": str(dtype).removeprefix("torch."),
        "shape": list(shape),
    }
out["seconds"] = round(time.perf_counter() - t0, 1)
print("RESULT " + json.dumps(out, default=str))
'''


def run_case(
    case: str,
    workers: int,
    limit: str,
    scratch: Path,
    device: str = "cpu",
    profile: bool = False,
    no_dashboard: bool = False,
) -> dict[str, Any]:
    store = scratch / f"{case.replace(':', '-')}.zarr"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    env.pop("TRITON_INTERPRET", None)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, case, str(store), str(workers), limit, device]
        + [str(int(profile)), str(int(no_dashboard))],
        capture_output=True,
        text=True,
        cwd=scratch,
        env=env,
    )
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if profile:
        sys.stderr.write("\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith("mugraph")) + "\n")
    if proc.returncode != 0 or not lines:
        return {"case": case, "failed": proc.stderr[-1500:], "wall": round(wall, 1)}
    result: dict[str, Any] = {"case": case, "wall": round(wall, 1), **json.loads(lines[-1][len("RESULT ") :])}
    result["at_tenth"] = best_at_tenth(store)
    return result


def best_at_tenth(store: Path) -> dict[str, list[float | None]]:
    """Per fragment: the best speedup found by a tenth of the run (from the stored find times) and
    the whole run's best."""
    sys.path.insert(0, str(ROOT))
    from mugraph.dashboards.find_times import best_at
    from mugraph.storage.run.backends import open_existing

    out: dict[str, list[float | None]] = {}
    with open_existing(store) as st:
        for f in st.fragments():
            b = best_at(st, f["name"], 0.1)
            if b is not None:
                out[f["name"]] = [b["speedup"], b["best_speedup"]]
    return out


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| case | dtype, shape | fragments: best estimated speedup | complete | rel. error | seconds "
        "| best by 10% of the run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "failed" in r:
            out.append(f"| {r['case']} | failed: {r['failed'].splitlines()[-1] if r['failed'] else '?'} | | | | | |")
            continue
        frs = ", ".join(
            f"{f['name']} {f['speedup']:.2f}x" if f.get("chosen") != "reference" else f"{f['name']} ref"
            for f in r.get("fragments", [])
            if isinstance(f, dict) and "speedup" in f
        )
        err = f"{r['rel_error']:.1e}" if r.get("rel_error") is not None else ""
        out.append(
            f"| {r['case']} | {r.get('dtype', '')} {r.get('shape', '')} | {frs} | {r.get('complete', '')} | {err} "
            f"| {r['seconds']} | {_tenth(r.get('at_tenth') or {})} |"
        )
    return "\n".join(out)


def timing_table(rows: list[dict[str, Any]]) -> str:
    """Measured on the GPU: the model against the module, per call (eager) and as CUDA graphs."""
    out = [
        "| case | model ms | module ms | measured speedup | model graph ms | module graph ms | graph speedup "
        "| estimated | self-check |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        t = r.get("timing")
        if not t:
            continue
        est = ", ".join(f"{f['name']} {f['speedup']:.2f}x" for f in r.get("fragments", []) if "speedup" in f)
        gm, gf = t["model_graph_ms"], t["module_graph_ms"]
        graph = f"{gm:.4f} | {gf:.4f} | {gm / gf:.2f}x" if gm is not None and gf is not None else "| | capture failed"
        out.append(
            f"| {r['case']} | {t['model_ms']:.4f} | {t['module_ms']:.4f} | {t['model_ms'] / t['module_ms']:.2f}x "
            f"| {graph} | {est} | {r.get('self_check') or 'agreed'} |"
        )
    return "\n".join(out)


def _tenth(at: dict[str, list[float | None]]) -> str:
    return ", ".join(
        f"{name} {'none' if got is None else f'{got:.2f}x'} of {whole:.2f}x" for name, (got, whole) in at.items()
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=CASES, help=f"cases to run (default: all of {CASES})")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-limit", default="", help="per case, as --time-limit takes it (default: none)")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/bench_torch_models"))
    ap.add_argument("--table", action="store_true", help="print a Markdown table at the end")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the models run (cuda: timed)")
    ap.add_argument("--profile", action="store_true", help="with --device cuda: the kernels of ten calls, on stderr")
    ap.add_argument("--no-dashboard", action="store_true", help="start each run's cluster without a dashboard")
    a = ap.parse_args()
    a.scratch.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in a.cases:
        row = run_case(case, a.workers, a.time_limit, a.scratch, a.device, a.profile, a.no_dashboard)
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)
    if a.table:
        print(table(rows))
        if any(r.get("timing") for r in rows):
            print(timing_table(rows))


if __name__ == "__main__":
    main()
