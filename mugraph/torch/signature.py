"""The model's forward signature kept in the exported program's file, so that a module made from a store
(`mugraph.load`, an unpickling) binds a call as the model binds it and names the parameter a call gets
wrong: `m(x, mask)` where the example call left `mask` at its default None.

Kept as JSON (parameter names, kinds and defaults), never a pickle: a default that is not None, a flag,
a number or a string is kept as its repr alone, a value no call can equal.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from typing import Any

FILE = "mugraph_forward.json"  # its name among torch.export's extra files (`extra/` in the archive)
_KIND = {
    "POSITIONAL_ONLY": inspect.Parameter.POSITIONAL_ONLY,
    "POSITIONAL_OR_KEYWORD": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "VAR_POSITIONAL": inspect.Parameter.VAR_POSITIONAL,
    "KEYWORD_ONLY": inspect.Parameter.KEYWORD_ONLY,
    "VAR_KEYWORD": inspect.Parameter.VAR_KEYWORD,
}


class OpaqueDefault:
    """A default kept by its repr alone: what a call left out computes with, equal to no value passed."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _plain(value: object) -> bool:
    return value is None or isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value))


def signature_json(forward: Callable[..., Any] | None) -> str | None:
    """The forward's parameters as JSON; None where it has no signature Python can read."""
    if forward is None:
        return None
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return None
    out: list[dict[str, Any]] = []
    for p in params:
        entry: dict[str, Any] = {"name": p.name, "kind": p.kind.name}
        if p.default is not inspect.Parameter.empty:
            entry["default" if _plain(p.default) else "opaque"] = (
                p.default if _plain(p.default) else repr(p.default)[:200]
            )
        out.append(entry)
    return json.dumps({"parameters": out})


def forward_of(text: str | None) -> Callable[..., Any] | None:
    """A stand-in for the model's forward with the signature `text` holds (None where it holds none
    that reads back: a file written without it, or one edited)."""
    if not text:
        return None
    try:
        params = [_parameter(p) for p in json.loads(text)["parameters"]]
        sig = inspect.Signature(params)
    except (ValueError, KeyError, TypeError):
        return None

    def forward(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError  # never called: only its signature is read

    forward.__signature__ = sig  # type: ignore[attr-defined]
    return forward


def _parameter(entry: dict[str, Any]) -> inspect.Parameter:
    name, kind = entry["name"], _KIND[entry["kind"]]
    if not isinstance(name, str):
        raise TypeError(name)
    if "default" in entry and _plain(entry["default"]):
        return inspect.Parameter(name, kind, default=entry["default"])
    if "opaque" in entry:
        return inspect.Parameter(name, kind, default=OpaqueDefault(str(entry["opaque"])))
    if "default" in entry:
        raise TypeError(entry)
    return inspect.Parameter(name, kind)
