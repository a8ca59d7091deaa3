"""A captured program's lowered graph evaluated in float64 by mugraph's own interpreter, to compare
with the model in float64."""

from __future__ import annotations

import numpy as np
import torch

from mugraph.ir.types import OpKind
from mugraph.stages.verify.algebra import Float64Algebra
from mugraph.stages.verify.interpret import evaluate
from mugraph.torch.capture import Captured


def program_in_float64(c: Captured, args: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """The lowered program's outputs, by fx node name, evaluated in float64 by mugraph's interpreter
    on the model's inputs and parameters widened to float64 (a model whose glue reads only inputs)."""
    ep = c.exported
    sig = ep.graph_signature
    env: dict[str, torch.Tensor] = {n: a.double() for n, a in zip(sig.user_inputs, args, strict=True)}
    env.update({ph: ep.state_dict[fqn].double() for ph, fqn in sig.inputs_to_parameters.items()})
    nodes = {n.name: n for n in ep.graph.nodes}

    def glue(name: str) -> torch.Tensor:  # a glue op over the inputs (a transpose), run by torch in float64
        if name not in env:
            node = nodes[name]
            args = torch.fx.node.map_arg(node.args, lambda a: glue(a.name))
            env[name] = node.target(*args, **node.kwargs)
        return env[name]

    arrays = []
    for name, _, _ in c.lowering.graph.input_signature():
        src = c.lowering.inputs[name]
        value = glue(src.node) if src.node is not None else torch.full(src.shape, src.value, dtype=torch.float64)
        base = src.kind.removesuffix("_scale")
        if base == "transpose":
            made = value.t()
        elif base == "reshape":
            made = value.reshape(src.shape)
        else:
            made = value
        made = made + src.shift  # a Gemma norm's 1 + w
        if src.kind.endswith("scale"):
            made = made * src.value
        arrays.append(made.detach().numpy())
    outs = evaluate(Float64Algebra(np), c.lowering.graph, arrays)
    names = [str(op.attr("name")) for op in c.lowering.graph.ops_of(OpKind.OUTPUT)]
    # a value held on its 2-d form leaves the program in its torch shape, as the module reshapes it
    return {n: torch.from_numpy(o).reshape(nodes[n].meta["val"].shape) for n, o in zip(names, outs, strict=True)}


def only_output(c: Captured, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    outs = program_in_float64(c, args)
    assert len(outs) == 1, outs.keys()
    return next(iter(outs.values()))
