"""The drop-in module's outputs against the model's own, once, on the example inputs, when
`mugraph.optimize` hands the module over. Fingerprints prove a μGraph equal to its fragment; they do
not prove that this machine runs its kernels right (Triton's interpreter once multiplied bfloat16
tiles' bit patterns in tl.dot, and a fused bf16 module returned 5e11 where the model gave 0.7). A
module that disagrees is not handed over: the model's own program runs instead, and the run says so.

A model that writes to its buffers or inputs (a KV cache, running statistics) is not checked: the
check would run it, and the module, once more than its user did.

The bound is far above rounding (fused kernels round differently from PyTorch's ops, a few ulps of
the output's dtype, summed over a few fragments) and far below a wrong kernel's error (an
inequivalent program differs by the order of the values themselves)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from mugraph.ir.plural import counted
from mugraph.torch.capture import run_as_written

# max |module - model| / max |model|, per output, by the output's dtype: 8-16x the tolerance a single
# fused program keeps against float64 (fp16 5e-3, bf16 4e-2, float32 1e-5 with IEEE products)
BOUNDS = {torch.float16: 4e-2, torch.bfloat16: 0.25, torch.float32: 1e-3}


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of an output, in a fixed order (tuples, lists and dicts by key, as torch flattens)."""
    leaves, _ = torch.utils._pytree.tree_flatten(value)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


# What `verdict.unchecked` says of such a model.
UNCHECKED_STATEFUL = "it writes to its buffers or inputs, and the check would run it once more than its caller did"


def writes_state(exported: torch.export.ExportedProgram) -> bool:
    """Whether the program writes to a buffer or an input when it runs."""
    from torch.export.graph_signature import OutputKind

    writes = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)
    return any(spec.kind in writes for spec in exported.graph_signature.output_specs)


def model_outputs(model: Callable[..., Any], example_inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The model's outputs on its example inputs, run as written, before any search: a model that
    fails there (inputs of a dtype its weights refuse, which an export's fake tensors let pass) is
    said so at once, not after the search, and the check compares against these."""
    return _tensors(run_as_written(model, tuple(example_inputs)))


def output_mismatch(
    run: Callable[..., Any], want: Sequence[torch.Tensor], example_inputs: Sequence[torch.Tensor]
) -> str | None:
    """None where `run` gives the model's outputs `want` on `example_inputs` within BOUNDS, else what
    differs."""
    with torch.no_grad():
        try:
            got = _tensors(run(*example_inputs))
        except Exception as e:  # the module failed where the model ran: the model's program runs instead
            return f"the module failed with {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    if len(got) != len(want):
        return f"{counted(len(got), 'output tensor')} where the model gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {k} is {list(g.shape)} {g.dtype} where the model's is {list(w.shape)} {w.dtype}"
        if not w.is_floating_point():
            if not torch.equal(g, w):
                return f"output {k} differs from the model's"
            continue
        gd, wd = g.detach().double(), w.detach().double()
        if not bool(torch.isfinite(gd).all()) and bool(torch.isfinite(wd).all()):
            return f"output {k} holds inf or nan where the model's is finite"
        scale = float(wd.abs().max()) if wd.numel() else 0.0
        err = float((gd - wd).abs().max()) if wd.numel() else 0.0
        bound = BOUNDS.get(w.dtype, 1e-3)
        if scale > 0 and err / scale > bound:
            return f"output {k} differs from the model's by {err / scale:.2g} of its largest value (bound {bound:g})"
    return None
