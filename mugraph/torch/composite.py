"""A computation users spell in several ATen ops that lowers to one IR op: a normalisation (`norms.py`)
or an activation written out (`activations.py`). The lowering replaces its nodes with the op, so no
fragment cut falls between them and the search sees the op it knows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import fx

CompositeKind = Literal["rms_norm", "layer_norm", "gelu", "gelu_erf", "silu"]


@dataclass(frozen=True)
class Composite:
    """`kind(x, eps)` · weight + bias over the last dim (a norm), or `kind(x)` element-wise (an
    activation: no eps, weight or bias), replacing `nodes`."""

    kind: CompositeKind
    root: fx.Node
    x: fx.Node
    eps: float
    weight: fx.Node | None
    bias: fx.Node | None
    nodes: frozenset[str]  # the fx nodes it replaces, the root among them
    weight_shift: float = 0.0  # the output is multiplied by weight + this (Gemma's 1 + w)
