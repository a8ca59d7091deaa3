"""What a program is (a reference tensor program plus the expert μGraphs known to equal it) and the table
the built-in programs register themselves in. Kept apart from `registry`, which imports the built-ins."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mugraph.ir.graph import KernelGraph
from mugraph.ir.names import check_label
from mugraph.ir.types import OpKind

GraphBuilder = Callable[[], KernelGraph]


@dataclass(frozen=True)
class Program:
    """A program to optimise. `experts` maps a label to a builder of an equivalent μGraph; the
    first one is *the* expert that searches must rediscover."""

    name: str
    description: str
    preset: str
    reference: GraphBuilder
    experts: Mapping[str, GraphBuilder] = field(default_factory=dict)
    source: str = "built-in"
    # Writes what a run needs beside its store that the graph does not hold (a captured PyTorch model's
    # exported program), given the store's path; called once the store is open.
    save_beside: Callable[[Path], None] | None = None
    # Search settings over the preset's, where the program is searched whole with its own preset (the
    # `--set` settings still win; an explicit `--preset` drops them)
    settings: Mapping[str, Any] = field(default_factory=dict)
    # A captured model's digest whole, glue included (`torch.capture.Captured.model_digest`): part of the
    # run's identity, as two models may lower to one searched program and differ in their glue
    model_digest: str | None = None
    # Heavy ops of a captured model that stay glue, run by PyTorch as written and never searched
    # ("conv2d (conv2d_1)"): what the command line's verdict notes, as `mugraph.optimize`'s does
    heavy_glue: tuple[str, ...] = ()
    # Every op of a captured model that stays glue, by op name ("permute", "softmax"): what the verdict's
    # fragments-together line names as not priced; () for a model with none, None where not known
    glue: tuple[str, ...] | None = None

    @property
    def from_torch(self) -> bool:
        """A captured PyTorch model's program (it keeps its exported program beside the store): its
        kept ops run in PyTorch, one kernel each, which is how its candidates are priced."""
        return self.save_beside is not None

    def __post_init__(self) -> None:
        check_label(self.name, "program")  # names are data: see `ir.names`
        for label in self.experts:
            check_label(label, "expert")


def suggest_preset(graph: KernelGraph) -> str:
    """The search preset for a fragment of a larger program: attention for an exp (the softmax of an
    attention fragment), else `default_preset`'s."""
    if any(op.kind is OpKind.EXP for op in graph.ops):
        return "attention"
    return default_preset(graph)


def default_preset(graph: KernelGraph) -> str:
    """The search preset for a whole program that names none (a program file, a PyTorch model): lora
    for four inputs or more (with `WIDE_FOUR_INPUTS`), else mlp. Under mlp's five kernel ops (inputs
    counted) four inputs leave room for one op, a space of one state. An exp alone does not make it
    attention's: that preset is shaped for attention (its grids and imaps), and on the README's
    exp(X·W) it found nothing in 30 s where mlp finds 104 μGraphs in 6 s."""
    return "lora" if len(graph.input_signature()) >= 4 else "mlp"


# Over lora's settings, for a whole program of four inputs that names no preset: lora's own (five kernel
# ops, Mirage's block-input rule) fit LoRA's shape alone. An RMSNorm then a linear with bias has its
# one fused kernel outside them (the bias is added after the accumulation, a kernel op of its own): lora
# searched 1.5 M states and found nothing; with these, 2.1 M states and 18 μGraphs, the fused one among
# them. A LoRA model (x·W + x·A·B) keeps its best, 2.42x at 60 s with either.
WIDE_FOUR_INPUTS: Mapping[str, Any] = {"max_kernel_ops": 6, "block_inputs": "subsets"}


def default_settings(graph: KernelGraph) -> Mapping[str, Any]:
    """The settings that go with `default_preset` for this graph."""
    return WIDE_FOUR_INPUTS if default_preset(graph) == "lora" else {}


def suggest_settings(graph: KernelGraph) -> Mapping[str, Any]:
    """The settings that go with `suggest_preset` for a fragment of a program that is not built in:
    a four-input fragment (a norm's product then a linear with bias, CLIP's (a·b)·W + bias) is searched
    as the same graph would be whole, where lora's own settings found nothing. Built-in programs'
    fragments keep their presets' own (their stores and figures are keyed by those configs)."""
    return WIDE_FOUR_INPUTS if suggest_preset(graph) == "lora" else {}


REGISTRY: dict[str, Program] = {}


def register(program: Program) -> Program:
    if program.name in REGISTRY:
        raise ValueError(f"program {program.name!r} registered twice")
    REGISTRY[program.name] = program
    return program
