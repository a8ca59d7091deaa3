"""The torch calls a module makes, counted by name: what tells a norm or a linear layer run as one
PyTorch call from the same computed as several."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from mugraph.ir.types import OpKind
from mugraph.torch.kernels import Launcher


class TorchCalls(TorchFunctionMode):
    """The torch functions and tensor methods a call makes, by name (not those they make inside)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(getattr(func, "__name__", str(func)).strip("_"))
        return func(*args, **(kwargs or {}))


def run_every_op(launcher: Launcher, tensors: dict[int, torch.Tensor]) -> list[int]:
    """Run each op of the launcher's program in order, as the module does; the tensors each made."""
    made: list[int] = []
    for index, op in enumerate(launcher.program.ops):
        if op.kind not in (OpKind.INPUT, OpKind.OUTPUT):
            made += launcher.run(index, tensors, None)
    return made
