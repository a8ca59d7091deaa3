"""What a call of a PyTorch run's module costs on the host, apart from its kernels: each store's module
(`mugraph.load`) called with its Triton launches and torch calls made free, in code trees side by side
(a `git worktree` of another commit), alternating, each run in a process of its own.

    python benchmarks/torch_host_overhead.py --tree before=/tmp/wt_before --tree after=. \\
        --rounds 3 STORE...

On a GPU the module's time as called less its CUDA graph's replay is this plus Triton's own launches."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import sys, time, torch, mugraph, mugraph.torch
import mugraph.torch.kernels as K
m = mugraph.load(sys.argv[1])
shape, dtype = next(iter(m._expected.values()))
x = torch.randn(*shape).to(dtype)
class Free:
    def __getitem__(self, grid):
        return lambda *a: None
if m._launcher.module is not None:
    for name, _ in m._launcher.info.values():
        setattr(m._launcher.module, name, Free())
K.torch_op = lambda op, args, dtype: torch.empty(m.program.tensors[op.outputs[0]].shape, dtype=dtype)
with torch.no_grad():
    for _ in range(50):
        m(x)
    n = 3000
    t = time.perf_counter()
    for _ in range(n):
        m(x)
print((time.perf_counter() - t) / n)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stores", nargs="+", type=Path)
    ap.add_argument("--tree", action="append", required=True, help="LABEL=PATH of a code tree")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    trees = [t.split("=", 1) for t in a.tree]
    print("| store | " + " | ".join(f"{label} μs" for label, _ in trees) + " | ratio |")
    print("| --- | " + " | ".join("---" for _ in trees) + " | --- |")
    for store in a.stores:
        times: dict[str, list[float]] = {label: [] for label, _ in trees}
        for _ in range(a.rounds):
            for label, path in trees:
                env = {**os.environ, "PYTHONPATH": str(Path(path).resolve()), "TRITON_INTERPRET": "1"}
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(store)], capture_output=True, text=True, env=env, check=True
                )
                times[label].append(float(out.stdout.strip().splitlines()[-1]))
        med = [statistics.median(times[label]) * 1e6 for label, _ in trees]
        print(f"| {store.name} | " + " | ".join(f"{m:.1f}" for m in med) + f" | {med[-1] / med[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
