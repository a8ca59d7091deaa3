"""Load a program from a built-in name, a Python file, or a JSON file.

A Python file defines `reference` (a KernelGraph, or a function returning one) and may define
`experts` (a dict of label to KernelGraph or function), `name` and `preset`. A JSON file is either
one kernel graph (`"schema": "mugraph.kernel-graph/1"`) or a program
(`"schema": "mugraph.program/1"` with `reference` and optional `experts`, `name`, `preset`).
Every failure becomes one ProgramLoadError naming the file and the line or field.
"""

from __future__ import annotations

import dataclasses
import json
import runpy
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mugraph.ir.errors import MugraphError, SchemaError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import SCHEMA, from_json, to_json
from mugraph.ir.types import OpKind
from mugraph.programs.program import Program
from mugraph.programs.registry import get_builtin

PROGRAM_SCHEMA = "mugraph.program/1"


class ProgramLoadError(MugraphError):
    """A program file could not be loaded; the message names the file and line or field."""


def resolve_program(spec: str) -> Program:
    """A built-in name, or a path ending in .py or .json."""
    if spec.endswith((".py", ".json")) or "/" in spec:
        return load_program(Path(spec))
    return get_builtin(spec)


def load_program(path: Path) -> Program:
    if not path.is_file():
        raise ProgramLoadError(f"{path}: no such file")
    if path.suffix == ".py":
        return _load_python(path)
    if path.suffix == ".json":
        return _load_json(path)
    raise ProgramLoadError(f"{path}: a program file must end in .py or .json")


def _line_in(path: Path, exc: BaseException) -> str:
    """`path:LINE` for the innermost traceback frame inside the program file."""
    line = None
    resolved = str(path.resolve())
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in (str(path), resolved):
            line = frame.lineno
    return f"{path}:{line}" if line else str(path)


def _escaped(path: Path, label: str, e: BaseException) -> ProgramLoadError:
    """A program file's code that tried to end the process (sys.exit, KeyboardInterrupt) is an error in it."""
    what = f"calls sys.exit({e.code!r})" if isinstance(e, SystemExit) else f"raises {type(e).__name__}"
    return ProgramLoadError(f"{_line_in(path, e)}: {label}{what}; a program file must only define its graphs")


def _python_graph(path: Path, label: str, value: Any) -> KernelGraph:
    try:
        graph = value() if callable(value) and not isinstance(value, KernelGraph) else value
    except MugraphError as e:
        raise ProgramLoadError(f"{_line_in(path, e)}: {label}: {e}") from None
    except Exception as e:  # a user's code failed: report its line, not our traceback
        raise ProgramLoadError(f"{_line_in(path, e)}: {label}: {type(e).__name__}: {e}") from None
    except (SystemExit, KeyboardInterrupt) as e:
        raise _escaped(path, f"{label} ", e) from None
    if not isinstance(graph, KernelGraph):
        raise ProgramLoadError(f"{path}: {label} must be a KernelGraph, got {type(graph).__name__}")
    return _checked(path, label, graph)


def _checked(path: Path, label: str, graph: KernelGraph) -> KernelGraph:
    """Refuse a graph with nothing to optimise: no outputs, or no op besides inputs and outputs."""
    kinds = {op.kind for op in graph.ops}
    if OpKind.OUTPUT not in kinds:
        raise ProgramLoadError(f"{path}: {label} has no outputs (mark one with mark_output)")
    if not kinds - {OpKind.INPUT, OpKind.OUTPUT}:
        raise ProgramLoadError(f"{path}: {label} has no ops besides its inputs and outputs")
    return graph


def _frozen(graph: KernelGraph) -> Callable[[], KernelGraph]:
    """A builder returning fresh copies of an already built graph."""
    data = to_json(graph)
    return lambda: from_json(data)


def _load_python(path: Path) -> Program:
    try:
        ns = runpy.run_path(str(path), run_name="mugraph_program")
    except SyntaxError as e:
        raise ProgramLoadError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except MugraphError as e:
        raise ProgramLoadError(f"{_line_in(path, e)}: {e}") from None
    except RecursionError as e:
        raise ProgramLoadError(f"{path}: nested too deeply ({e})") from None
    except Exception as e:
        raise ProgramLoadError(f"{_line_in(path, e)}: {type(e).__name__}: {e}") from None
    except (SystemExit, KeyboardInterrupt) as e:
        raise _escaped(path, "", e) from None
    if "reference" not in ns and "model" in ns and "example_inputs" in ns:
        return _torch_program(path, ns)
    if "reference" not in ns:
        raise ProgramLoadError(f"{path}: defines no `reference` (a KernelGraph or a function returning one), nor "
                               "`model` and `example_inputs` (a PyTorch module or function and its inputs)")
    reference = _python_graph(path, "reference", ns["reference"])
    experts_raw = ns.get("experts", {})
    if not isinstance(experts_raw, dict):
        raise ProgramLoadError(f"{path}: `experts` must be a dict of label to KernelGraph")
    experts = {str(k): _frozen(_python_graph(path, f"experts[{k!r}]", v)) for k, v in experts_raw.items()}
    return _program(path, ns.get("name"), ns.get("preset"), reference, experts)


def _torch_program(path: Path, ns: dict[str, Any]) -> Program:
    """A file defining `model` (a torch.nn.Module or a function) and `example_inputs`: captured with
    torch.export; the run keeps the exported program beside its store, where `mugraph.load` finds it."""
    name = ns.get("name")
    try:
        from mugraph.torch.errors import require_torch

        require_torch()
        from mugraph.torch.capture import capture

        captured = capture(ns["model"], ns["example_inputs"], name if isinstance(name, str) else path.stem)
    except MugraphError as e:
        raise ProgramLoadError(f"{path}: {e}") from None
    prog = _program(path, name, ns.get("preset"), captured.lowering.graph, {})
    return dataclasses.replace(prog, description=f"PyTorch model from {path}", save_beside=captured.save_beside)


def _program(
    path: Path, name: Any, preset: Any, reference: KernelGraph, experts: dict[str, Callable[[], KernelGraph]]
) -> Program:
    if name is not None and not isinstance(name, str):
        raise ProgramLoadError(f"{path}: `name` must be a string")
    if preset is not None and preset not in ("mlp", "lora", "attention"):
        raise ProgramLoadError(f"{path}: preset {preset!r} is not one of mlp, lora, attention")
    return Program(
        name or path.stem, f"program from {path}", preset or "mlp", _frozen(reference), experts,
        source=str(path),
    )


def _load_json(path: Path) -> Program:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ProgramLoadError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise ProgramLoadError(f"{path}: not UTF-8 text ({e.reason})") from None
    except RecursionError:
        raise ProgramLoadError(f"{path}: invalid JSON: nested too deeply") from None
    except OSError as e:
        raise ProgramLoadError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        if isinstance(data, dict) and data.get("schema") == PROGRAM_SCHEMA:
            reference = _checked(path, "reference", from_json(data.get("reference"), path="reference"))
            experts_raw = data.get("experts", {})
            if not isinstance(experts_raw, dict):
                raise SchemaError("experts: expected an object of label to graph")
            experts = {
                str(k): _frozen(from_json(v, path=f"experts.{k}")) for k, v in experts_raw.items()
            }
            return _program(path, data.get("name"), data.get("preset"), reference, experts)
        if isinstance(data, dict) and data.get("schema") not in (SCHEMA, None):
            raise SchemaError(
                f"schema: {data.get('schema')!r} is neither {SCHEMA!r} nor {PROGRAM_SCHEMA!r}"
            )
        return _program(path, None, None, _checked(path, "the graph", from_json(data)), {})
    except ProgramLoadError:
        raise
    except MugraphError as e:
        raise ProgramLoadError(f"{path}: {e}") from None
    except RecursionError:
        raise ProgramLoadError(f"{path}: nested too deeply") from None
