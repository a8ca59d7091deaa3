"""What a PyTorch model's fragment references cost before and after a norm's weight and bias were
priced as part of PyTorch's one norm call, without a search: each model is captured and split as
`mugraph optimize` does, and each fragment's reference priced by `emitted-v2-torch` (the norm, its
mul by the weight and its add of the bias, three calls) and by `emitted-v2-torch-norm-calls` (one
call, as the model runs it); beside them, what keeping the reference runs in the module: op by op
under `emitted-v2-torch-norms` (the module ran the three ops as three torch calls), and now (one
call: the same as the reference's price), with the torch calls the module's launcher makes for it.
The built-in programs' references are priced by `emitted-v2` as written and as any graph, which
must agree. (The torch model after it, `emitted-v2-torch-linear-calls`, takes a matmul's bias in too:
`bench_linear_reference.py`; the module's torch calls here are the launcher's of today, which does.)

A fragment's speedup is its reference's price over its best μGraph's, so a price ratio old/new is the
factor by which each of its speedups falls.

    python benchmarks/bench_norm_reference.py [--profile H100]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from mugraph.ir.families import PREDEFINED
from mugraph.programs import builtin_programs
from mugraph.stages.fragments import split_program
from mugraph.stages.layout.emitted import (
    EMITTED,
    EMITTED_TORCH_NORM_CALLS,
    EMITTED_TORCH_REFERENCE_NORMS,
    EMITTED_TORCH_SEPARATE_AFFINE,
)
from mugraph.stages.layout.profiles import PROFILES
from mugraph.torch.capture import capture
from mugraph.torch.kernels import Launcher


class PreLN(nn.Module):
    """LayerNorm, Linear, GELU, Linear, residual (a ViT or GPT-2 MLP half)."""

    def __init__(self, d: int = 256, f: int = 512) -> None:
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, f), nn.Linear(f, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.fc2(F.gelu(self.fc1(self.ln(x))))
        return out


class PreRMS(nn.Module):
    """RMSNorm with weight, Linear, SiLU, Linear, residual (benchmarks' prenorm_mlp)."""

    def __init__(self, d: int = 256, f: int = 1024) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(d, eps=1e-5)
        self.fc1, self.fc2 = nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.fc2(F.silu(self.fc1(self.norm(x))))
        return out


MODELS: dict[str, Callable[[], nn.Module]] = {
    "LayerNorm(256)": lambda: nn.LayerNorm(256),
    "LayerNorm(256, bias=False)": lambda: nn.LayerNorm(256, bias=False),
    "RMSNorm(256)": lambda: nn.RMSNorm(256, eps=1e-5),
    "pre-LN GELU MLP": PreLN,
    "pre-RMSNorm SiLU MLP": PreRMS,
}


def torch_rows(profile: str) -> list[str]:
    p = PROFILES[profile]
    rows = []
    for name, make in MODELS.items():
        torch.manual_seed(0)
        captured = capture(make().half().eval(), (torch.randn(16, 256).half(),))
        for spec in split_program(captured.lowering.graph).fragments:
            g = spec.graph
            ops = ", ".join(str(op.kind) for op in g.ops if str(op.kind) not in ("input", "output"))
            old = EMITTED_TORCH_SEPARATE_AFFINE.as_written().price(g, None, p)
            new = EMITTED_TORCH_NORM_CALLS.as_written().price(g, None, p)
            kept_before = EMITTED_TORCH_REFERENCE_NORMS.price(g, None, p)
            kept = EMITTED_TORCH_NORM_CALLS.price(g, None, p)
            prices = " | ".join(f"{t * 1e6:.2f}" for t in (old, new, kept_before, kept))
            calls = f"{sum(op.kind in PREDEFINED for op in g.ops)} -> {Launcher(g, {}).torch_calls}"
            rows.append(f"| {name} | {spec.name}: {ops} | {prices} | {calls} | {old / new:.2f}x |")
    return rows


def builtin_rows(profile: str) -> list[str]:
    p = PROFILES[profile]
    rows = []
    for name, program in sorted(builtin_programs().items()):
        g = program.reference()
        written, plain = EMITTED.as_written().price(g, None, p), EMITTED.price(g, None, p)
        same = "same" if written == plain else "DIFFERS"
        rows.append(f"| {name} | {plain * 1e6:.2f} | {written * 1e6:.2f} | {same} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="H100", choices=sorted(PROFILES))
    profile = ap.parse_args().profile
    print(f"PyTorch models, fp16 [16, 256], {profile} (μs)\n")
    print(
        "| model | fragment | reference, emitted-v2-torch | reference, -norm-calls | kept, before (op by op) "
        "| kept, -norm-calls | module's torch calls, before -> now | falls by |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(torch_rows(profile)))
    print(f"\nbuilt-in programs' references, emitted-v2, {profile} (μs)\n")
    print("| program | as any graph | as written | |")
    print("| --- | --- | --- | --- |")
    print("\n".join(builtin_rows(profile)))


if __name__ == "__main__":
    main()
