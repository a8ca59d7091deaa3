"""Pick the array namespace once: the stages are written against NumPy's API, which CuPy mirrors."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Literal

import numpy

from mugraph.ir.errors import MugraphError

ArrayModule = ModuleType
Backend = Literal["auto", "numpy", "cupy"]


def cupy_available() -> bool:
    """True when CuPy imports and a CUDA device with a working driver is present."""
    try:
        cupy = importlib.import_module("cupy")
        return bool(cupy.cuda.is_available())
    except Exception:  # ImportError, or a CUDA runtime error without a driver
        return False


def get_array_module(backend: str = "auto") -> ArrayModule:
    if backend == "numpy":
        return numpy
    if backend in ("auto", "cupy"):
        if cupy_available():
            return importlib.import_module("cupy")
        if backend == "cupy":
            raise MugraphError("backend 'cupy' requested but no usable CUDA device was found")
        return numpy
    raise MugraphError(f"unknown array backend {backend!r}; choose auto, numpy or cupy")


def backend_name(xp: ArrayModule) -> str:
    return "cupy" if xp.__name__.startswith("cupy") else "numpy"


def synchronize(xp: ArrayModule) -> None:
    """Wait for the device's default stream (nothing to wait for on NumPy)."""
    if backend_name(xp) == "cupy":
        xp.cuda.Stream.null.synchronize()


def device_name(xp: ArrayModule) -> str:
    """The CUDA device's name, as its driver reports it; "cpu" for NumPy."""
    if backend_name(xp) != "cupy":
        return "cpu"
    name = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def to_numpy(x: object) -> numpy.ndarray:
    get = getattr(x, "get", None)
    return numpy.asarray(get() if callable(get) else x)
