"""Layouts and ranking rows as text a person reads (used by `mugraph show` and the report)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mugraph.ir.graph import KernelGraph
from mugraph.ir.plural import counted
from mugraph.ir.types import OpKind
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.emitted import TORCH_MODEL_PREFIX


def _dims(shape: Sequence[int], inner: int, swizzle: int) -> str:
    """`[64,96]:1~0`: the shape, its innermost dim after `:`, a swizzled dim after `~`."""
    return "[" + ",".join(map(str, shape)) + f"]:{inner}" + (f"~{swizzle}" if swizzle >= 0 else "")


def describe_layouts(graph: KernelGraph, layouts: Layouts) -> list[str]:
    """One line for the device tensors and one per block graph: each tensor's shape, its innermost
    (stride-1) dim after `:`, and a swizzled dim after `~`."""
    names: dict[int, str] = {}
    for op in graph.ops:
        match op.kind:
            case OpKind.INPUT:
                names[op.outputs[0]] = str(op.attr("name"))
            case OpKind.OUTPUT:
                names[op.inputs[0]] = str(op.attr("name"))
            case _:
                pass  # the tensors other ops make are named by index
    device = [
        f"{names.get(t.index, f't{t.index}')}{_dims(t.shape, layouts.kernel[t.index], -1)}" for t in graph.tensors
    ]
    lines = ["device tensors: " + " ".join(device)]
    for index, op in enumerate(graph.ops):
        if op.block is None:
            continue
        pairs = layouts.blocks[index]
        shared = [f"s{t.index}{_dims(t.shape, *pairs[t.index])}" for t in op.block.tensors]
        lines.append(f"block graph of op {index} (grid {list(op.block.grid)}): " + " ".join(shared))
    return lines


def seconds_text(s: float) -> str:
    return f"{s * 1e6:,.1f} μs"


def what_runs(row: Mapping[str, Any]) -> str:
    """What a ranked row runs: its kernels, or, for a PyTorch model's kept reference, the PyTorch calls it
    is priced as (a linear layer with its bias one `addmm`, where its graph holds a matmul and an add)."""
    if _priced_as_calls(row):
        return counted(int(row["emitted_launches"]), "PyTorch call")
    return counted(int(row["kernels"]), "kernel")


def _priced_as_calls(row: Mapping[str, Any]) -> bool:
    """A PyTorch model's kept reference, priced as the calls PyTorch makes, not as its kernels."""
    return (
        bool(row.get("reference"))
        and str(row.get("model", "")).startswith(TORCH_MODEL_PREFIX)
        and ("emitted_launches" in row)
    )


def explain(row: Mapping[str, Any], reference: Mapping[str, Any]) -> str:
    """Why a row is faster or slower than the reference, in the terms of the model that ranked them:
    the emitted model's (launch and call overhead, DRAM time, serial time) where the rows carry them,
    else the roofline's. rms_norm's best and its reference have two kernels and the same DRAM bytes
    each; the emitted model tells them apart by the reference's norm, four array calls."""
    if "emitted_launch_seconds" in row and "emitted_launch_seconds" in reference:
        return _explain_emitted(row, reference)
    parts = [
        f"{what_runs(row)} vs {_ref_runs(reference)} (launches {seconds_text(row['launch_seconds'])}"
        f" vs {seconds_text(reference['launch_seconds'])})",
        f"DRAM {row['dram_bytes']:,} B vs {reference['dram_bytes']:,} B",
        f"bound by {row['bound']}",
    ]
    if not row["fits"]:
        parts.append("does NOT fit the profile's shared memory")
    return "; ".join(parts)


def _ref_runs(ref: Mapping[str, Any]) -> str:
    """The reference's side of "N kernels vs M": its kernel count, or the PyTorch calls a model's kept
    reference is priced as (as the headline counts it)."""
    return what_runs(ref) if _priced_as_calls(ref) else str(ref["kernels"])


def _explain_emitted(row: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    def vs(key: str) -> str:
        return f"{seconds_text(float(row[key]))} vs {seconds_text(float(ref[key]))}"

    parts = [
        f"{what_runs(row)} vs {_ref_runs(ref)}",
        f"launch and call overhead {vs('emitted_launch_seconds')}",
        f"DRAM time {vs('emitted_dram_seconds')} ({row['dram_bytes']:,} B vs {ref['dram_bytes']:,} B)",
    ]
    if row.get("emitted_serial_seconds") or ref.get("emitted_serial_seconds"):
        parts.append(f"serial time {vs('emitted_serial_seconds')}")
    if row.get("emitted_spill_bytes"):
        parts.append(f"spills {row['emitted_spill_bytes']:,} B of registers")
    if not row["fits"]:
        parts.append("does NOT fit the profile's shared memory")
    return "; ".join(parts)
