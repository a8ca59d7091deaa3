"""What a PyTorch model's fragment references cost before and after a matmul's bias add was priced as
part of PyTorch's one `F.linear` / `addmm` call, without a search: each model is captured and split as
`mugraph optimize` does, and each fragment's reference priced by `emitted-v2-torch-norm-calls` (the
matmul, then the add of the bias over the whole output: two calls) and by
`emitted-v2-torch-linear-calls` (one call, as the model runs it, and as the module now runs a kept
pair), with the torch calls the module's launcher made for it before and makes now.

A fragment's speedup is its reference's price over its best μGraph's, so a price ratio old/new is the
factor by which each of its speedups falls. Then the built-in programs (no bias add): every graph of
theirs (references, fragments, the layout corpus's μGraphs) priced by both torch models on every
profile, as any graph and as written, which must agree term for term.

    python benchmarks/bench_linear_reference.py [--profile H100]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import loads
from mugraph.programs import builtin_programs
from mugraph.stages.fragments import split_program
from mugraph.stages.layout.emitted import EMITTED_TORCH, EMITTED_TORCH_NORM_CALLS
from mugraph.stages.layout.profiles import PROFILES
from mugraph.torch.capture import capture
from mugraph.torch.kernels import Launcher

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "stages" / "layout" / "data" / "mugraphs.jsonl"


class Mlp(nn.Module):
    """Linear, GELU, Linear, both with biases."""

    def __init__(self, d: int = 256, f: int = 512) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, f), nn.Linear(f, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(F.gelu(self.fc1(x)))
        return out


class PreLN(Mlp):
    """LayerNorm, then the MLP, plus the residual (a ViT or GPT-2 MLP half)."""

    def __init__(self, d: int = 256, f: int = 512) -> None:
        super().__init__(d, f)
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + super().forward(self.ln(x))


class Conv1D(nn.Module):
    """GPT-2's Conv1D: addmm(b, x.view(-1, d), W) with W stored [in, out]."""

    def __init__(self, d: int = 256, f: int = 768) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(0.02 * torch.randn(d, f)), nn.Parameter(torch.zeros(f))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight)
        return out.view(*x.shape[:-1], -1)


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "Linear(256, 256)": (lambda: nn.Linear(256, 256), (64, 256)),
    "Linear(256, 256, bias=False)": (lambda: nn.Linear(256, 256, bias=False), (64, 256)),
    "Linear(256, 256) on [4, 16, 256]": (lambda: nn.Linear(256, 256), (4, 16, 256)),
    "MLP with biases": (Mlp, (64, 256)),
    "pre-LN GELU MLP": (PreLN, (64, 256)),
    "GPT-2 Conv1D (addmm)": (Conv1D, (2, 32, 256)),
}


def torch_rows(profile: str) -> list[str]:
    p = PROFILES[profile]
    rows = []
    for name, (make, shape) in MODELS.items():
        torch.manual_seed(0)
        captured = capture(make().half().eval(), (torch.randn(*shape).half(),))
        for spec in split_program(captured.lowering.graph).fragments:
            g = spec.graph
            ops = ", ".join(str(op.kind) for op in g.ops if str(op.kind) not in ("input", "output"))
            old = EMITTED_TORCH_NORM_CALLS.as_written().predict(g, None, p)
            new = EMITTED_TORCH.as_written().predict(g, None, p)
            kept = EMITTED_TORCH.price(g, None, p)
            prices = " | ".join(f"{t * 1e6:.2f}" for t in (old["estimated_seconds"], new["estimated_seconds"], kept))
            calls = f"{old['launches']} -> {Launcher(g, {}).torch_calls}"  # the reference: no Triton kernel
            ratio = old["estimated_seconds"] / new["estimated_seconds"]
            rows.append(f"| {name} | {spec.name}: {ops} | {prices} | {calls} | {ratio:.2f}x |")
    return rows


def builtin_graphs() -> list[KernelGraph]:
    graphs = [p.reference() for _, p in sorted(builtin_programs().items())]
    graphs += [spec.graph for g in list(graphs) for spec in split_program(g).fragments]
    lines = [line for line in CORPUS.read_text().splitlines() if line.strip()]
    return graphs + [loads(json.loads(line)["graph"]) for line in lines]


def builtin_comparisons() -> tuple[int, int, int]:
    """(graphs, price comparisons, those identical term for term but for the model's name)."""
    graphs = builtin_graphs()
    compared = same = 0
    for g in graphs:
        for p in PROFILES.values():
            for new, old in (
                (EMITTED_TORCH, EMITTED_TORCH_NORM_CALLS),
                (EMITTED_TORCH.as_written(), EMITTED_TORCH_NORM_CALLS.as_written()),
            ):
                a, b = new.predict(g, None, p), old.predict(g, None, p)
                compared += 1
                same += {**a, "model": ""} == {**b, "model": ""}
    return len(graphs), compared, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="H100", choices=sorted(PROFILES))
    profile = ap.parse_args().profile
    print(f"PyTorch models, fp16, {profile} (μs)\n")
    print(
        "| model | fragment | reference, -norm-calls | reference, -linear-calls | kept, now "
        "| module's torch calls, before -> now | falls by |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(torch_rows(profile)))
    graphs, compared, same = builtin_comparisons()
    print(
        f"\nbuilt-in programs: {graphs} graphs, {compared} price comparisons (every profile, as any graph and "
        f"as written), {same} identical, {compared - same} differ"
    )


if __name__ == "__main__":
    main()
