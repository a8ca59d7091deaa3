"""The library entry: `mugraph.optimize` and `mugraph.load` for a run made from a PyTorch model. A run
is put together by `mugraph.run` (options, paths, plan, store, cluster), which the command line calls
too; this module re-exports its names (`OptimizeOptions`, `run_optimize`) for scripts."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from mugraph.programs import Program
from mugraph.programs.program import default_preset, default_settings
from mugraph.run.execute import reused, run_optimize, run_prepared
from mugraph.run.options import (
    DEFAULT_RUNS,
    OptimizeKeywords,
    OptimizeOptions,
    OptionError,
    OptionValueError,
    check_options,
    default_store,
    model_command,
)
from mugraph.run.prepare import Prepared, prepare, require_triton_for_torch

if TYPE_CHECKING:
    from mugraph.pipeline.events import Event
    from mugraph.torch.capture import Captured
    from mugraph.torch.runtime import OptimizedModule
    from mugraph.torch.verdict import Verdict

__all__ = [
    "DEFAULT_RUNS",
    "OptimizeKeywords",
    "OptimizeOptions",
    "OptionError",
    "OptionValueError",
    "Prepared",
    "check_options",
    "default_store",
    "load",
    "optimize",
    "prepare",
    "run_optimize",
    "run_prepared",
]


def optimize(
    model: Any,
    example_inputs: Any,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
    on_event: Callable[[Event], None] | None = None,
    verbose: bool = True,
    **options: Unpack[OptimizeKeywords],
) -> OptimizedModule:
    """Optimise a PyTorch module or function at the shapes of `example_inputs` (positional) and
    `example_kwargs` (by name: `layer(h, attention_mask=mask)`): capture it with torch.export, search its
    fragments (`options` are OptimizeOptions' fields), and return a drop-in module, called as the model
    was, running the chosen μGraphs as Triton kernels, glue in torch, holding the model's own parameters;
    its `verdict` says what the search got. A store holding this program and config's finished result is
    reused, a stopped one resumed. `verbose` prints on stderr what `mugraph optimize` prints."""
    check_options(options)
    from mugraph.torch.errors import require_torch

    require_torch()
    require_triton_for_torch()  # before the capture and the search: the module runs Triton kernels
    from mugraph.run.outcome import Console, verdict_of
    from mugraph.torch.capture import capture
    from mugraph.torch.example_call import example_args, example_keywords, keyword_tensors
    from mugraph.torch.kernels import check_model_device
    from mugraph.torch.program import optimized_module
    from mugraph.torch.self_check import model_outputs, writes_state

    t0 = time.perf_counter()
    args, kwargs = example_args(example_inputs), example_keywords(example_kwargs)
    check_model_device(model, (*args, *keyword_tensors(kwargs)))  # before the search: its module could not run them
    captured = capture(model, example_inputs, name, kwargs)
    stateless = not writes_state(captured.exported)
    called = functools.partial(model, **kwargs)  # the model and the module, called as the example call is
    want = model_outputs(called, args) if stateless else None  # before the search: a model that fails says so
    prog = Program(
        captured.name,
        f"PyTorch model {captured.name}",
        default_preset(captured.lowering.graph),
        captured.builder(),
        {},
        source="torch",
        save_beside=captured.save_beside,
        settings=default_settings(captured.lowering.graph),
        model_digest=captured.model_digest,
    )
    opts = dataclasses.replace(OptimizeOptions(**options), command=model_command(captured.name, bool(kwargs)))
    run = prepare(prog, opts)
    console = Console(verbose)
    stored = reused(run, t0)
    if stored is not None:
        done = stored
        console.reused(done)
    else:

        def emit(e: Event) -> None:
            console.event(e)
            if on_event is not None:
                on_event(e)

        try:
            done = run_prepared(run, emit)
        finally:
            console.close()
    if on_event is not None:  # last, as the command line's --json ends with it; alone for a reused store
        on_event(done)
    module = optimized_module(Path(done["store"]), captured)
    module = _handed_over(
        module,
        captured,
        verdict_of(done, module.heavy_glue, stored is not None, module.glue_ops),
        called,
        want,
        args,
        kwargs,
    )
    console.verdict(done, module.verdict)
    return module


def _handed_over(
    module: OptimizedModule,
    captured: Captured,
    verdict: Verdict,
    called: Callable[..., Any],
    want: list[Any] | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> OptimizedModule:
    """The module as `optimize` returns it, its verdict set: checked against the model's outputs `want`
    on the example call (None for a model that writes its buffers or inputs: not run again), the model's
    own program in its place where they disagree, and timed beside the model where compiled on a GPU."""
    from mugraph.torch.kernels import interpreting
    from mugraph.torch.runtime import OptimizedModule
    from mugraph.torch.self_check import UNCHECKED_STATEFUL, output_mismatch
    from mugraph.torch.timing import measure

    run = functools.partial(module, **kwargs)
    mismatch = output_mismatch(run, want, args) if want is not None else None
    if want is None:
        verdict = dataclasses.replace(verdict, unchecked=UNCHECKED_STATEFUL)
    if mismatch is not None:  # the model's own program, in torch, rather than kernels that disagree
        module = OptimizedModule(captured, captured.lowering.graph, "reference", share=True)
        varies = output_mismatch(called, want or [], args) is not None  # a random op differs each call
        verdict = dataclasses.replace(verdict, self_check=mismatch, model_varies=varies)
    elif want is not None and not interpreting():  # compiled on a GPU: what a call costs, beside the estimate
        verdict = dataclasses.replace(verdict, measured=measure(run, called, args))
    module.verdict = verdict
    return module


def load(store: str | Path) -> OptimizedModule:
    """The drop-in module of a run made from a PyTorch model (by `mugraph.optimize` or by `mugraph
    optimize model.py`): its best μGraphs so far as Triton kernels, the glue in torch, the weights
    those of the exported program saved with the run (checked against the digest the store recorded,
    and refused where it holds anything torch would unpickle); its `verdict` as the store has it. The
    module is checked once against that program, on inputs made from the example inputs' shapes: where
    its outputs differ, it runs the model's own program, and `verdict.self_check` says so."""
    from mugraph.torch.errors import require_torch

    require_torch()
    from mugraph.run.outcome import stored_done, verdict_of
    from mugraph.torch.program import load_store

    path = Path(store)
    module = load_store(path)
    done = stored_done(path, write_missing_report=False)  # a store may be read-only: load writes nothing
    module.verdict = verdict_of(done, module.heavy_glue, True, module.glue_ops).after_load(module.load_check)
    return module
