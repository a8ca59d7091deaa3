"""What one `optimize` run computes: the program's fragments, each with its search config, the task
budget, and the run's identity (what a store made for this run must match to be resumed)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import SCHEMA, digest, dumps, loads
from mugraph.ir.types import OpKind
from mugraph.programs.program import Program, suggest_preset, suggest_settings
from mugraph.stages.fragments import FragmentSpec, Split, split_program
from mugraph.stages.search.config import SearchConfig, check_eps, for_reference, no_preset_among, preset_config
from mugraph.stages.search.explore import SEARCH_TREE, Fragment


@dataclass(frozen=True, slots=True)
class FragmentPayload:
    """What a worker needs to search or confirm one fragment: plain text, cached by `digest`."""

    index: int
    name: str
    digest: str  # of (reference, config): the search.Fragment digest
    reference: str  # canonical JSON of the fragment's reference graph
    config: str  # JSON of its SearchConfig

    def search_config(self) -> SearchConfig:
        """The fragment's search config, rebuilt from its JSON (on a worker, which gets only the payload)."""
        return SearchConfig().with_overrides(json.loads(self.config))

    def fragment(self) -> Fragment:
        """The search's fragment: the reference graph and config a worker's Searcher is made for."""
        return Fragment(loads(self.reference), self.search_config(), self.name)


@dataclass(frozen=True)
class FragmentPlan:
    spec: FragmentSpec
    config: SearchConfig
    payload: FragmentPayload


@dataclass(frozen=True)
class RunPlan:
    program: Program
    reference: KernelGraph
    split: Split
    fragments: tuple[FragmentPlan, ...]
    budget: int

    @property
    def identity(self) -> dict[str, str]:
        """The fields a resumed store must match: the same program, configs and task split."""
        configs = "|".join(f"{f.spec.name}:{f.config.digest}" for f in self.fragments)
        identity = {
            "program": self.program.name,
            "program_digest": digest(self.reference),
            "config_digest": hashlib.sha256(configs.encode()).hexdigest()[:32],
            "budget": str(self.budget),
            "ir_schema": str(SCHEMA),
            "search_tree": SEARCH_TREE,
        }
        if self.program.model_digest is not None:  # a PyTorch model's: its glue too
            identity["model_digest"] = self.program.model_digest
        return identity


def program_config(program: Program, preset: str | None, overrides: Mapping[str, Any]) -> SearchConfig:
    """The config of a program searched whole: `preset` (`--preset`) as it is, else the program's own
    with the settings that come with it; `overrides` (`--set`) over either."""
    no_preset_among(overrides)
    if preset is not None:
        return preset_config(preset).with_overrides(overrides)
    return preset_config(program.preset).with_overrides({**program.settings, **overrides})


def fragment_settings(program: Program, graph: KernelGraph, preset: str | None) -> Mapping[str, Any]:
    """The settings over the suggested preset for one fragment of a split program: those the same graph
    would get whole, for a program that is not built in and names no preset (`--preset` drops them)."""
    return suggest_settings(graph) if preset is None and program.source != "built-in" else {}


def make_plan(program: Program, preset: str | None, overrides: Mapping[str, Any], budget: int) -> RunPlan:
    """`preset` None: the program's own for a one-fragment program, else one suggested per fragment.
    `overrides` (the `--set` settings) apply to every fragment."""
    no_preset_among(overrides)
    reference = program.reference()
    split = split_program(reference)
    plans = []
    whole = len(split.fragments) == 1
    for spec in split.fragments:
        config = (
            program_config(program, preset, overrides)
            if whole
            else preset_config(preset or suggest_preset(spec.graph)).with_overrides(
                {**fragment_settings(program, spec.graph, preset), **overrides}
            )
        )
        config = for_reference(config, {op.kind for op in spec.graph.ops})
        check_eps(config, spec.graph.ops)
        ref_json = dumps(spec.graph)
        frag_digest = hashlib.sha256(f"{digest(spec.graph)}|{config.digest}".encode()).hexdigest()[:32]
        payload = FragmentPayload(spec.index, spec.name, frag_digest, ref_json, json.dumps(config.to_json()))
        plans.append(FragmentPlan(spec, config, payload))
    return RunPlan(program, reference, split, tuple(plans), budget)


def fragment_io_layouts(plan: RunPlan, layouts: Mapping[str, int]) -> list[dict[str, int]]:
    """The user's innermost dims (`--layout NAME=DIM`, NAME a program input or output) as each
    fragment sees them: inputs keep their names; a program output becomes the fragment output it
    comes from. Names that are neither, and dims that are not dims of the tensor, are refused."""
    shapes = {n: s for n, s, _ in plan.reference.input_signature()}
    outputs = dict(plan.split.outputs)
    out_shapes = {
        str(op.attr("name")): plan.reference.tensors[op.inputs[0]].shape for op in plan.reference.ops_of(OpKind.OUTPUT)
    }
    per: list[dict[str, int]] = [{} for _ in plan.fragments]
    frag_index = {fp.spec.name: i for i, fp in enumerate(plan.fragments)}
    for name, dim in sorted(layouts.items()):
        shape = shapes.get(name, out_shapes.get(name))
        if shape is None:
            known = ", ".join([*shapes, *out_shapes])
            raise MugraphError(f"--layout {name}: not an input or output of {plan.program.name} (they are: {known})")
        if not -len(shape) <= dim < len(shape):
            raise MugraphError(
                f"--layout {name}={dim}: {name} has shape {list(shape)}, so the innermost dim is one "
                f"of 0..{len(shape) - 1}"
            )
        dim %= len(shape)
        if name in shapes:
            for i, fp in enumerate(plan.fragments):
                if name in fp.spec.sources:
                    per[i][name] = dim
        else:
            frag, _, out = outputs[name].partition(":")
            if frag in frag_index:  # an output made by a glue op has no fragment to lay out
                per[frag_index[frag]][out] = dim
    return per
