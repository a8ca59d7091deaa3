"""Load a program from a built-in name, a Python file, or a JSON file.

A Python file defines `reference` (a KernelGraph, or a function returning one) and may define
`experts` (a dict of label to KernelGraph or function), `name` and `preset`. A JSON file is either
one kernel graph (`"schema": "mugraph.kernel-graph/1"`) or a program
(`"schema": "mugraph.program/1"` with `reference` and optional `experts`, `name`, `preset`).
Every failure becomes one ProgramLoadError naming the file and the line or field. Names (the
program's, its experts', its tensors') are checked here as data (see `ir.names`); an interrupt that
arrives while a Python file runs stays an interrupt, while the file's own `raise KeyboardInterrupt` (or
any other BaseException) is an error in the file.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.util
import json
import re
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mugraph.ir.errors import MugraphError, SchemaError
from mugraph.ir.families import BOUNDARY
from mugraph.ir.graph import KernelGraph
from mugraph.ir.names import check_label, printable, shown
from mugraph.ir.serialize import SCHEMA, from_json, to_json
from mugraph.ir.types import OpKind
from mugraph.programs.program import Program, default_preset, default_settings
from mugraph.programs.registry import builtin_programs, get_builtin

PROGRAM_SCHEMA = "mugraph.program/1"


class ProgramLoadError(MugraphError):
    """A program file could not be loaded; the message names the file and line or field."""


def _at(path: Path) -> str:
    """A path as messages show it (no raw control or bidirectional characters)."""
    return printable(str(path))


def resolve_program(spec: str) -> Program:
    """A built-in name, or a path ending in .py or .json."""
    if spec.lower().endswith((".py", ".json")) or "/" in spec:
        return load_program(Path(spec))
    try:
        return get_builtin(spec)
    except MugraphError as e:
        files = _files_named(spec)
        if not files:
            raise
        raise MugraphError(f"{e}; did you mean the file {' or '.join(map(str, files))}?") from None


def resolve_recorded_program(spec: str) -> Program | None:
    """A program as a run store recorded it (its identity's name, its command's PROGRAM), resolved
    only where that runs no code: a built-in name or a JSON file; None for anything else. A store is
    data someone may hand over, and its recorded path could name any Python file, so a `.py` program
    is run only where the user names it on the command line (`resolve_program`)."""
    if spec in builtin_programs():
        return get_builtin(spec)
    if spec.lower().endswith(".json"):
        return load_program(Path(spec))
    return None


def _files_named(name: str) -> list[Path]:
    """The program files NAME.py and NAME.json that are there: what a bare NAME likely meant."""
    return [path for path in (Path(f"{name}{ext}") for ext in (".py", ".json")) if path.is_file()]


def _meant(path: Path) -> str:
    """For a program file that is not there: the file or built-in program the user likely meant."""
    if not path.suffix:
        found = _files_named(str(path))
    else:
        lower = path.with_suffix(path.suffix.lower())
        found = [lower] if lower != path and lower.is_file() else []
    if found:
        return f"; did you mean {_at(found[0])}?"
    if path.stem in builtin_programs() and path.parent == Path("."):
        return f"; the built-in program is named {path.stem!r}, without a suffix"
    return ""


def load_program(path: Path) -> Program:
    if path.is_dir():
        raise ProgramLoadError(f"{_at(path)}: a directory, not a program file (.py or .json)")
    if not path.is_file():
        raise ProgramLoadError(f"{_at(path)}: no such file{_meant(path)}")
    if path.suffix == ".py":
        return _load_python(path)
    if path.suffix == ".json":
        return _load_json(path)
    raise ProgramLoadError(f"{_at(path)}: a program file must end in .py or .json")


def _line_in(path: Path, exc: BaseException) -> str:
    """`path:LINE` for the innermost traceback frame inside the program file."""
    line = None
    resolved = str(path.resolve())
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in (str(path), resolved):
            line = frame.lineno
    return f"{_at(path)}:{line}" if line else _at(path)


def _type_name(e: BaseException) -> str:
    name = type(e).__name__
    return name if name.isidentifier() and name.isascii() else shown(name)


def _escaped(path: Path, label: str, e: BaseException) -> ProgramLoadError:
    """A program file's code that tried to end the process (sys.exit, KeyboardInterrupt, GeneratorExit, a
    BaseException of its own) is an error in it."""
    what = f"calls sys.exit({shown(e.code)})" if isinstance(e, SystemExit) else f"raises {_type_name(e)}"
    return ProgramLoadError(f"{_line_in(path, e)}: {label}{what}; a program file must only define its graphs")


@contextlib.contextmanager
def _signals_seen() -> Iterator[list[int]]:
    """The SIGINT and SIGTERM that arrive while a program file runs, noted on the way to the handler
    already installed: a KeyboardInterrupt with one noted is the user's interrupt (Ctrl-C), not the
    file's doing. Only where the installed handler is a Python function (the CLI's, or Python's own
    default_int_handler); main thread only, as signal handlers are."""
    seen: list[int] = []
    wrapped: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(signum)
            if callable(previous):

                def note(n: int, frame: Any, previous: Callable[[int, Any], Any] = previous) -> Any:
                    seen.append(n)
                    return previous(n, frame)

                signal.signal(signum, note)
                wrapped[signum] = (note, previous)
    try:
        yield seen
    finally:
        for wrapped_signum, (note, previous) in wrapped.items():
            if signal.getsignal(wrapped_signum) is note:  # else the handler itself changed it (SIGTERM: ignored now)
                signal.signal(wrapped_signum, previous)


def _message(e: BaseException) -> str:
    return printable(f"{_type_name(e)}: {e}")


def _python_graph(path: Path, label: str, value: Any, seen: list[int]) -> KernelGraph:
    try:
        graph = value() if callable(value) and not isinstance(value, KernelGraph) else value
    except MugraphError as e:
        raise ProgramLoadError(f"{_line_in(path, e)}: {label}: {printable(str(e))}") from None
    except Exception as e:  # a user's code failed: report its line, not our traceback
        raise ProgramLoadError(f"{_line_in(path, e)}: {label}: {_message(e)}") from None
    except KeyboardInterrupt as e:
        if seen:
            raise  # the user's Ctrl-C or a SIGTERM: the command is interrupted, the file is not to blame
        raise _escaped(path, f"{label} ", e) from None
    except BaseException as e:  # sys.exit, GeneratorExit, a BaseException subclass of the file's own
        raise _escaped(path, f"{label} ", e) from None
    if not isinstance(graph, KernelGraph):
        raise ProgramLoadError(f"{_at(path)}: {label} must be a KernelGraph, got {printable(type(graph).__name__)}")
    return _checked(path, label, graph)


def _checked(path: Path, label: str, graph: KernelGraph) -> KernelGraph:
    """Refuse a graph with nothing to optimise: no outputs, or no op besides inputs and outputs."""
    kinds = {op.kind for op in graph.ops}
    if OpKind.OUTPUT not in kinds:
        how = 'an op {"kind": "output", "inputs": [i], "name": ...}' if path.suffix == ".json" else "mark_output"
        raise ProgramLoadError(f"{_at(path)}: {label} has no outputs (mark one with {how})")
    if not kinds - BOUNDARY:
        raise ProgramLoadError(f"{_at(path)}: {label} has no ops besides its inputs and outputs")
    return graph


def _frozen(graph: KernelGraph) -> Callable[[], KernelGraph]:
    """A builder returning fresh copies of an already built graph."""
    data = to_json(graph)
    return lambda: from_json(data)


def _load_python(path: Path) -> Program:
    with _signals_seen() as seen:
        return _run_python(path, seen)


@contextlib.contextmanager
def _folder_on_path(path: Path) -> Iterator[None]:
    """The file's folder first on sys.path while it runs, as `python FILE` has it, so the file can import
    a helper module kept beside it."""
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


# A file that names these may import Triton (transformers' modeling modules do) before mugraph.torch
# could choose Triton's interpreter for a machine without a CUDA device; mugraph.torch is imported first.
_TORCH_WORDS = re.compile(r"\b(torch|transformers|diffusers|timm)\b")


def _before_a_torch_file(path: Path) -> None:
    """Import mugraph.torch before running a file that looks like a PyTorch model's, so that its imports
    cannot take the choice of Triton's interpreter away (the run would then be refused)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return  # running it says what is wrong
    if _TORCH_WORDS.search(text) and importlib.util.find_spec("torch") is not None:
        import mugraph.torch  # noqa: F401  (chooses the interpreter when imported)


def _run_python(path: Path, seen: list[int]) -> Program:
    _before_a_torch_file(path)
    try:
        with _folder_on_path(path):
            ns = runpy.run_path(str(path), run_name="mugraph_program")
    except SyntaxError as e:
        raise ProgramLoadError(f"{_at(path)}:{e.lineno}: syntax error: {printable(str(e.msg))}") from None
    except MugraphError as e:
        raise ProgramLoadError(f"{_line_in(path, e)}: {printable(str(e))}") from None
    except RecursionError as e:
        raise ProgramLoadError(f"{_at(path)}: nested too deeply ({e})") from None
    except Exception as e:
        raise ProgramLoadError(f"{_line_in(path, e)}: {_message(e)}") from None
    except KeyboardInterrupt as e:
        if seen:
            raise  # the user's Ctrl-C or a SIGTERM: the command is interrupted, the file is not to blame
        raise _escaped(path, "", e) from None
    except BaseException as e:  # sys.exit, GeneratorExit, a BaseException subclass of the file's own
        raise _escaped(path, "", e) from None
    if "reference" not in ns and "model" in ns and "example_inputs" in ns:
        return _torch_program(path, ns)
    if "reference" not in ns:
        raise ProgramLoadError(f"{_at(path)}: {_missing_definition(ns)}")
    reference = _python_graph(path, "reference", ns["reference"], seen)
    experts_raw = ns.get("experts", {})
    if not isinstance(experts_raw, dict):
        raise ProgramLoadError(
            f"{_assigned_at(path, 'experts')}: `experts` must be a dict of label to KernelGraph (or to a function "
            f"returning one), not a {type(experts_raw).__name__}"
        )
    experts = _each_expert(path, experts_raw, lambda k, v: _python_graph(path, f"experts[{shown(k)}]", v, seen))
    return _program(path, ns.get("name"), ns.get("preset"), reference, experts)


def _assigned_at(path: Path, name: str) -> str:
    """`path:LINE` of the file's last top-level assignment to `name` (the value the file ends with),
    or the path alone where none is found."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return _at(path)
    lines = [
        node.lineno
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(t, ast.Name) and t.id == name
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    ]
    return f"{_at(path)}:{lines[-1]}" if lines else _at(path)


def _missing_definition(ns: dict[str, object]) -> str:
    """What a program file lacks, where it defines no `reference`: the one name its `model` or
    `example_inputs` lacks beside it, or both ways of defining a program."""
    if "model" in ns:
        return "defines `model` but no `example_inputs` (the inputs to call it with, a tensor or a tuple of them)"
    if "example_inputs" in ns:
        return "defines `example_inputs` but no `model` (the PyTorch module or function to call with them)"
    return (
        "defines no `reference` (a KernelGraph or a function returning one), "
        "nor `model` and `example_inputs` (a PyTorch module or function and its inputs)"
    )


def _torch_program(path: Path, ns: dict[str, object]) -> Program:
    """A file defining `model` (a torch.nn.Module or a function) and `example_inputs` (and, for a model
    called with keywords, `example_kwargs`): captured with torch.export; the run keeps the exported
    program beside its store, where `mugraph.load` finds it.
    Unless the file sets `name`, the program is named after the model's class or function, as
    `mugraph.optimize` names it (the only name it has), so both paths default to one store."""
    name = ns.get("name")
    try:
        from mugraph.torch.errors import require_torch

        require_torch()
        from mugraph.torch.capture import capture
        from mugraph.torch.verdict import glue_ops, heavy_glue

        keywords: Any = ns.get("example_kwargs")  # checked by the capture, as mugraph.optimize's
        captured = capture(ns["model"], ns["example_inputs"], name if isinstance(name, str) else None, keywords)
    except MugraphError as e:
        raise ProgramLoadError(f"{path}: {e}") from None
    prog = _program(path, captured.name if name is None else name, ns.get("preset"), captured.lowering.graph, {})
    return dataclasses.replace(
        prog,
        description=f"PyTorch model from {path}",
        save_beside=captured.save_beside,
        model_digest=captured.model_digest,
        heavy_glue=heavy_glue(captured),
        glue=glue_ops(captured),
    )


def _program(
    path: Path, name: Any, preset: Any, reference: KernelGraph, experts: dict[str, Callable[[], KernelGraph]]
) -> Program:
    if name is not None and not isinstance(name, str):
        raise ProgramLoadError(f"{_at(path)}: `name` must be a string")
    if preset is not None and preset not in ("mlp", "lora", "attention"):
        raise ProgramLoadError(f"{_at(path)}: preset {shown(preset)} is not one of mlp, lora, attention")
    try:
        label = check_label(name or path.stem, "program")
    except MugraphError as e:
        hint = "" if name else " (a program is named after its file unless the file sets `name`)"
        raise ProgramLoadError(f"{_at(path)}: {e}{hint}") from None
    chosen, settings = (preset, {}) if preset else (default_preset(reference), default_settings(reference))
    return Program(
        label, f"program from {_at(path)}", chosen, _frozen(reference), experts, source=_at(path), settings=settings
    )


def _json_expert(path: Path, key: str, value: Any) -> KernelGraph:
    try:
        return _checked(path, f"experts.{key}", from_json(value, path=f"experts.{key}"))
    except ProgramLoadError:
        raise
    except MugraphError as e:
        raise ProgramLoadError(f"{_at(path)}: {e}") from None


def _each_expert(
    path: Path, raw: dict[Any, Any], build: Callable[[Any, Any], KernelGraph]
) -> dict[str, Callable[[], KernelGraph]]:
    """Every expert built, or one error naming each that failed: a file's author fixing experts one at a
    time would otherwise learn of the next only after rerunning. Two keys naming one label (1 and "1")
    are refused, since the second would replace the first."""
    experts: dict[str, Callable[[], KernelGraph]] = {}
    problems: list[str] = []
    labels: set[str] = set()  # every label met, an unreadable expert's too
    for key, value in raw.items():
        try:
            label = _label(path, key)
            if label in labels:
                raise ProgramLoadError(f"{_at(path)}: two experts are labelled {shown(label)}")
            labels.add(label)
            experts[label] = _frozen(build(key, value))
        except ProgramLoadError as e:
            problems.append(str(e))
    if len(problems) == 1:
        raise ProgramLoadError(problems[0])
    if problems:
        raise ProgramLoadError(f"{len(problems)} experts cannot be read:\n" + "\n".join(problems))
    return experts


def _label(path: Path, key: Any) -> str:
    """An expert's label, checked as a name."""
    try:
        return check_label(key if isinstance(key, str) else str(key), "expert")
    except MugraphError as e:
        raise ProgramLoadError(f"{_at(path)}: {e}") from None


class _TwiceError(ValueError):
    """A key given twice in one JSON object: Python's reader keeps the last, silently."""


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise _TwiceError(f"key {k!r} given twice in one object (the second would replace the first)")
        seen[k] = v
    return seen


_PROGRAM_KEYS = frozenset({"schema", "name", "preset", "reference", "experts"})


def _load_json(path: Path) -> Program:
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_once)
    except _TwiceError as e:
        raise ProgramLoadError(f"{_at(path)}: invalid JSON: {e}") from None
    except json.JSONDecodeError as e:
        raise ProgramLoadError(f"{_at(path)}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise ProgramLoadError(f"{_at(path)}: not UTF-8 text ({e.reason})") from None
    except RecursionError:
        raise ProgramLoadError(f"{_at(path)}: invalid JSON: nested too deeply") from None
    except OSError as e:
        raise ProgramLoadError(f"{_at(path)}: cannot read: {e.strerror or e}") from None
    try:
        if isinstance(data, dict) and data.get("schema") == PROGRAM_SCHEMA:
            if "reference" not in data:
                raise SchemaError(f"reference: missing (a {PROGRAM_SCHEMA} file holds the reference graph)")
            if unknown := sorted(set(data) - _PROGRAM_KEYS):
                named, known = ", ".join(map(repr, unknown)), ", ".join(sorted(_PROGRAM_KEYS))
                raise SchemaError(f"unknown field(s) {named} (a program has: {known})")
            reference = _checked(path, "reference", from_json(data.get("reference"), path="reference"))
            experts_raw = data.get("experts", {})
            if not isinstance(experts_raw, dict):
                raise SchemaError("experts: expected an object of label to graph")
            experts = _each_expert(path, experts_raw, lambda k, v: _json_expert(path, k, v))
            return _program(path, data.get("name"), data.get("preset"), reference, experts)
        if isinstance(data, dict) and data.get("schema") not in (SCHEMA, None):
            raise SchemaError(f"schema: {data.get('schema')!r} is neither {SCHEMA!r} nor {PROGRAM_SCHEMA!r}")
        return _program(path, None, None, _checked(path, "the graph", from_json(data)), {})
    except ProgramLoadError:
        raise
    except MugraphError as e:
        raise ProgramLoadError(f"{_at(path)}: {e}") from None
    except RecursionError:
        raise ProgramLoadError(f"{_at(path)}: nested too deeply") from None
