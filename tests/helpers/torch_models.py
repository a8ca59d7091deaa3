"""The models the torch tests capture: plain PyTorch, written as users write them."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

D, HEADS, FFN, SEQ = 64, 2, 128, 16


class RMSNorm(nn.Module):
    """Llama's RMSNorm: weight and epsilon."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return out


class DecoderBlock(nn.Module):
    """A Llama-style decoder block on one sequence [SEQ, D]: RMSNorm, q/k/v projections, softmax
    attention per head, output projection and residual, RMSNorm, SiLU-gated MLP, residual."""

    def __init__(self, dim: int = D, heads: int = HEADS, ffn: int = FFN) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq, dim = x.shape
        h = self.attn_norm(x)
        q, k, v = (p(h).view(seq, self.heads, self.head_dim).transpose(0, 1) for p in (self.q, self.k, self.v))
        scores = q @ k.transpose(1, 2) / math.sqrt(self.head_dim)
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.o(attn.transpose(0, 1).reshape(seq, dim))
        h = self.mlp_norm(x)
        out: torch.Tensor = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return out


class GeluMLP(nn.Module):
    """Linear, GELU in its exact (erf) form, PyTorch's default, linear."""

    def __init__(self, dim: int = D, hidden: int = FFN) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(F.gelu(self.fc1(x)))
        return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A function, not a module: F.rms_norm with a weight and an epsilon."""
    return F.rms_norm(x, (x.shape[-1],), weight, 1e-5)


def build(cls: Callable[[], nn.Module], seed: int = 0, dtype: torch.dtype = torch.float16) -> nn.Module:
    """A model with seeded weights (PyTorch's own initialisation) in `dtype`, in eval mode."""
    torch.manual_seed(seed)
    return cls().to(dtype).eval()


def inputs(*shapes: tuple[int, ...], seed: int = 1, dtype: torch.dtype = torch.float16) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=g).to(dtype) for s in shapes)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want|, in float64."""
    g, w = got.detach().double(), want.detach().double()
    return float((g - w).abs().max() / w.abs().max())


def float64_output(model: object, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The model's own output in float64 (a copy of the module in float64, fp16 inputs widened)."""
    import copy

    wide = [a.double() for a in args]
    if isinstance(model, nn.Module):
        return copy.deepcopy(model).double()(*wide)  # type: ignore[no-any-return]
    assert callable(model)
    return model(*wide)  # type: ignore[no-any-return]


class GeluLinear(nn.Module):
    """A linear layer (no bias) then GELU in its erf form: one fragment the search fuses into one kernel."""

    def __init__(self, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x))


# Narrowed search limits for GeluLinear at [16, 32] (one grid, one for-loop range, no pre-defined
# kernel ops): a complete search of a few seconds that still finds the fused matmul + erf-GELU kernel.
GELU_LINEAR_SETTINGS = {"grids": [[2, 1, 1]], "franges": [4], "kernel_ops": [], "imaps": [[-1, -1, -1], [1, -1, -1]]}


class Branchy(torch.nn.Module):
    """Data-dependent control flow: torch.export keeps it as a `cond` op, which neither the IR nor glue runs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.cond(x.sum() > 0, lambda x: x @ x, lambda x: x.t() @ x, (x,))
        return out
