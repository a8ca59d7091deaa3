"""The torch calls a module makes, counted by name: what tells a norm or a linear layer run as one
PyTorch call from the same computed as several."""

from __future__ import annotations

from typing import Any

from torch.overrides import TorchFunctionMode


class TorchCalls(TorchFunctionMode):
    """The torch functions and tensor methods a call makes, by name (not those they make inside)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(getattr(func, "__name__", str(func)).strip("_"))
        return func(*args, **(kwargs or {}))
