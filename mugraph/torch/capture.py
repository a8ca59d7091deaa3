"""Capturing a PyTorch module or function with torch.export, and the exported file kept with a run.

The exported program (its ATen graph, the parameters' values, the input and output structure) is what
both ends use: the capture lowers it to a mugraph program, and `load` rebuilds the drop-in module
from the same file, so the search and the returned module always agree on the graph.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import io
import logging
import re
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import digest, from_json, to_json
from mugraph.storage.run.paths import RunPaths
from mugraph.torch.archive import UnsafeArchiveError, extra_file, read_recorded
from mugraph.torch.errors import CaptureError, NothingLowered
from mugraph.torch.example_call import (
    check_binds,
    check_eval_mode,
    check_positional,
    example_args,
    example_keywords,
)
from mugraph.torch.lower import Lowering, lower
from mugraph.torch.quiet import quiet_torch
from mugraph.torch.signature import FILE, forward_of, signature_json


def exported_path(store: Path) -> Path:
    """Where a run made from a PyTorch model keeps its exported program: `NAME.zarr` -> `NAME.torch.pt2`."""
    return RunPaths(store).exported


class _Function(torch.nn.Module):
    """A plain function as a module, so torch.export takes it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _as_module(fn: Callable[..., Any]) -> torch.nn.Module:
    """`fn` as a module whose forward has fn's parameter names (torch.export names the inputs after them)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return _Function(fn)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return _Function(fn)
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD

    def forward(self: _Function, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("self", positional),
            *(p if p.kind is p.KEYWORD_ONLY else p.replace(kind=positional) for p in params),
        ]
    )
    return cast(torch.nn.Module, type(model_name(fn), (_Function,), {"forward": forward})(fn))


@dataclass(frozen=True)
class Captured:
    """A model's exported program and its lowering."""

    name: str
    exported: torch.export.ExportedProgram
    lowering: Lowering
    # the module captured (the model, or a function's wrapper), where this process holds it: what the
    # drop-in module runs where its kernels cannot (None for a program read back from a store)
    model: torch.nn.Module | None = field(default=None, compare=False, repr=False)
    # the model's forward signature as JSON, as its exported program's file keeps it (a program read back
    # from a store has no model: this is what its module binds calls by); None where not known
    signature: str | None = field(default=None, compare=False, repr=False)

    @property
    def forward(self) -> Callable[..., Any] | None:
        """The model's forward, or a stand-in with its signature; None where neither is known."""
        return self.model.forward if self.model is not None else forward_of(self.signature)

    @property
    def digest(self) -> str:
        return digest(self.lowering.graph)

    @functools.cached_property
    def model_digest(self) -> str:
        """The captured model whole, glue included (the lowered program's digest covers only what is
        searched): its ATen graph with every op's arguments and literal constants, its inputs' shapes
        and dtypes, its input and output structure and its lifted constants' values; not its weights'
        or buffers' values, which the module reads at every call. Two models with the same searched
        program but another `is_causal`, slope or head count get stores of their own."""
        ep = self.exported
        h = hashlib.sha256(ep.graph_module.code.encode())
        h.update(f"{ep.graph_signature}\0{ep.call_spec.in_spec}\0{ep.call_spec.out_spec}".encode())
        for node in ep.graph.nodes:
            val = node.meta.get("val")
            if node.op == "placeholder" and isinstance(val, torch.Tensor):
                h.update(f"{node.name}:{tuple(val.shape)}:{val.dtype}\0".encode())
        for name in sorted(ep.graph_signature.inputs_to_lifted_tensor_constants.values()):
            value = ep.constants[name]
            if isinstance(value, torch.Tensor):
                h.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        return h.hexdigest()[:32]

    def builder(self) -> Callable[[], KernelGraph]:
        """Fresh copies of the captured program (a Program's reference)."""
        data = to_json(self.lowering.graph)
        return lambda: from_json(data)

    def save_beside(self, store: Path) -> None:
        """Keep the exported program beside a run's store, where `load` finds it."""
        self.save(exported_path(store))

    def save(self, path: Path) -> Path:
        """Write the exported program (graph and weights, no sample inputs: torch pickles those) to
        `path` (torch.export's .pt2 format)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name.removesuffix(".pt2") + ".tmp.pt2")  # torch.export wants the suffix
        ep = self.exported
        examples = ep.example_inputs
        ep.example_inputs = None
        try:
            with quiet_torch():
                sig = signature_json(self.model.forward) if self.model is not None else self.signature
                torch.export.save(ep, str(tmp), extra_files={FILE: sig} if sig is not None else None)
        except Exception as e:  # torch's refusal (a NamedTuple output it has no name for): one line, no file left
            tmp.unlink(missing_ok=True)
            raise CaptureError(
                f"{self.name}: torch.export cannot save the exported program: {_save_problem(e)}"
            ) from None
        finally:
            ep.example_inputs = examples
        tmp.replace(path)
        return path


def _save_problem(e: BaseException) -> str:
    """What torch.export.save refused, said so that the user can act on it."""
    first = _first_line(e)
    if "namedtuple" in first.lower():
        return f"{first.split(' because')[0]}; return a tuple or a dict from forward instead"
    return f"{type(e).__name__}: {first}"


def model_name(model: Any) -> str:
    """A program name for a model: its class or function name."""
    raw = getattr(model, "__name__", None) if not isinstance(model, torch.nn.Module) else type(model).__name__
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(raw or "model"))
    return name.strip("_-") or "model"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _user_line(e: BaseException) -> str:
    """`file:line` of the model's own code where torch stopped: named in torch's message, else the
    innermost traceback frame outside torch and outside code made at run time (`<string>`: torch's
    generated wrappers lie between the call and the model's line)."""
    torch_dir = str(Path(torch.__file__).parent)
    frames = [(f, int(n)) for f, n in _FRAME.findall(str(e))]
    frames += [(f.filename, f.lineno or 0) for f in reversed(traceback.extract_tb(e.__traceback__))]
    mine = [f"{f}:{n}" for f, n in frames if not f.startswith((torch_dir, "<")) and "mugraph" not in Path(f).parts]
    return mine[0] if mine else ""


@contextlib.contextmanager
def _export_log(into: list[str]) -> Iterator[None]:
    """torch.export.load logs why it failed (an op it cannot resolve) and raises an error that only
    points at that log: its logger's records, with their tracebacks, are kept in `into` instead."""

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            into.append(record.getMessage() + "\n" + "".join(traceback.format_exception(*record.exc_info or (None,))))

    logger = logging.getLogger("torch.export")
    handler, previous = Keep(), logging.root.manager.disable
    logger.addHandler(handler)
    logging.disable(logging.NOTSET)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        logging.disable(previous)


_UNRESOLVED = re.compile(r"failed to resolve (torch\.ops\.(\w+)\.\w+)(?:\.\w+)? to an operator")


def _load_failure(error: Exception, logged: list[str]) -> str:
    """Why torch.export.load failed: an op registered by a library not imported in this process (the
    usual cause: a model's custom op), named with what to import; else torch's first line."""
    found = _UNRESOLVED.search("\n".join(logged))
    if found is None:
        return _first_line(error)
    op, namespace = found.groups()
    return (
        f"it calls {op}, an op that the library defining it registers (namespace {namespace!r}) and that "
        f"is not registered in this process; import that library's module that defines it before "
        f"mugraph.load (for {namespace!r} ops, the module the model imported them from)"
    )


def as_module(model: Any) -> torch.nn.Module:
    """The module torch.export captures: the model itself, or a wrapper of a plain function."""
    if isinstance(model, torch.nn.Module):
        return model
    if callable(model):
        return _as_module(model).eval()  # our wrapper of a function: no state that training changes
    raise CaptureError(f"model must be a torch.nn.Module or a function, not {type(model).__name__}")


def export(
    model: Any, example_inputs: Any, example_kwargs: Mapping[str, Any] | None = None
) -> torch.export.ExportedProgram:
    """torch.export of a module (in eval mode: one in training mode is refused) or function at the
    example inputs' shapes, called with `example_inputs` by position and `example_kwargs` by name."""
    module = as_module(model)
    args, kwargs = example_args(example_inputs), example_keywords(example_kwargs, module)
    check_positional(module, args)
    check_eval_mode(module, model_name(model))
    check_binds(module, args, kwargs, model_name(model))
    try:
        with quiet_torch():
            exported = torch.export.export(module, args, kwargs=kwargs)
            with warnings.catch_warnings():  # torch's own deprecations inside its passes (an error under -W error)
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                # functional form, ops kept whole: in-place writes become outputs (a buffer's new value)
                return cast(torch.export.ExportedProgram, exported.run_decompositions({}))
    except MugraphError:
        raise
    except Exception as e:  # torch's own refusals (data-dependent control flow, unsupported calls)
        where = _user_line(e)
        if _data_dependent(e):
            raise CaptureError(_data_dependent_refusal(model_name(model), where, e)) from None
        hint = _cache_hint(e)  # with a cache, torch's advice (register a pytree) misleads
        raise CaptureError(
            f"torch.export cannot capture {model_name(model)}{' at ' + where if where else ''}: "
            f"{type(e).__name__}: {_first_line(e) if not hint else _first_line(e).split('. ')[0]}{hint}"
        ) from None


def _data_dependent(e: BaseException) -> bool:
    """torch.export stopped where the model's Python branches on, or sizes a value by, a tensor's data
    (`if idx.numel() == 0`, `range(int(count))`): GuardOnDataDependentSymNode and its kin."""
    return "DataDependent" in type(e).__name__ or "data-dependent expression" in _first_line(e)


def _data_dependent_refusal(name: str, where: str, e: BaseException) -> str:
    """One line for a model whose control flow or a size depends on its tensors' values: which expression,
    where, and what to do. Ops whose sizes depend on the data (nonzero, a boolean mask's indexing) are
    captured and left to torch; only Python reading such a size (a branch, a loop count) cannot be."""
    expr = re.search(r"data-dependent expression (.+?) \(unhinted", _first_line(e))
    what = f" ({expr.group(1)})" if expr else ""
    return (
        f"torch.export cannot capture {name}{' at ' + where if where else ''}: its Python code branches on or "
        f"sizes something by a value computed from the tensors' data{what}, such as a count of routed tokens "
        "or of nonzero entries, which a captured graph cannot hold; remove that branch (ops of data-dependent "
        "size, as nonzero, masked indexing or routing tokens to experts, are captured and left to torch), "
        "or optimise the submodules whose shapes are fixed (mugraph.optimize(model.layer, ...)) and keep the "
        "rest in torch"
    )


_CACHE_CLASS = re.compile(r"\b\w*Cache\b")


def _cache_hint(e: BaseException) -> str:
    """What to do where torch.export met a KV cache object (a Hugging Face model with use_cache on
    returns one): the module computes without a cache, so the model is captured with it off."""
    if _CACHE_CLASS.search(_first_line(e)) is None:
        return ""
    return (
        "; the model makes or reads a KV cache object (a Hugging Face model does while use_cache is on): "
        "optimise it with example_kwargs={'use_cache': False} (or set config.use_cache = False), and call "
        "the optimized module with use_cache=False too"
    )


def capture(
    model: Any, example_inputs: Any, name: str | None = None, example_kwargs: Mapping[str, Any] | None = None
) -> Captured:
    """Export `model` at `example_inputs` (and `example_kwargs`, by name) and lower it to a mugraph
    program."""
    ep = export(model, example_inputs, example_kwargs)
    try:
        lowering = lower(ep)
    except NothingLowered:
        # a model that does not run: that, not the lowering, is the news
        run_as_written(model, example_inputs, example_kwargs)
        raise
    return Captured(name or model_name(model), ep, lowering, as_module(model))


def run_as_written(model: Any, example_inputs: Any, example_kwargs: Mapping[str, Any] | None = None) -> Any:
    """The model's outputs on its example inputs, without grad; a CaptureError saying how it fails there
    (an export traces shapes and may pass a model whose ops refuse its inputs' dtypes)."""
    try:
        with torch.no_grad():
            return model(*example_args(example_inputs), **(example_kwargs or {}))
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise CaptureError(
            f"the model fails on its example inputs, run as written: {type(e).__name__}: {first}"
        ) from None


def load_exported(path: Path, name: str, recorded: str | None) -> Captured:
    """The capture of an exported program saved with a run, whose archive digest the store recorded
    (`recorded`): checked for anything torch would unpickle, and against the digest, before torch reads
    it; then every call in its graph must be an operator (glue runs them at every call)."""
    if not path.is_file():
        raise CaptureError(
            f"{path}: no exported program (the run was not made from a PyTorch model, or the file was removed)"
        )
    data = read_recorded(path, recorded)
    logged: list[str] = []
    try:
        with quiet_torch(), _export_log(logged):
            ep = torch.export.load(io.BytesIO(data))
    except Exception as e:
        raise CaptureError(f"{path}: cannot read the exported program: {_load_failure(e, logged)}") from None
    for node in ep.graph.nodes:
        if node.op == "call_function" and not _is_operator(node.target):
            raise UnsafeArchiveError(
                f"{path}: node {node.name} calls {getattr(node.target, '__name__', node.target)!r}, not a torch "
                "operator; refusing to load it"
            )
    return Captured(name, ep, lower(ep), signature=extra_file(data, FILE))


def _is_operator(target: object) -> bool:
    """An ATen/torch operator, a higher-order operator, or Python's `operator` module (getitem): what
    torch.export's graphs call, as opposed to any other Python callable a crafted graph could name."""
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket | torch._ops.HigherOrderOperator):
        return True
    return getattr(target, "__module__", None) in ("_operator", "operator") and callable(target)
