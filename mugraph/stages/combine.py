"""Stage 6: stitch the chosen μGraph of every fragment back into one program, in the split's order;
a fragment without a choice keeps its own reference. A chosen μGraph must match its fragment's
input and output names, shapes and dtypes, or the stitch fails naming the fragment."""

from __future__ import annotations

from collections.abc import Mapping

from mugraph.ir.compose import inline
from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph, Tensor
from mugraph.ir.shapes import fmt
from mugraph.ir.types import OpKind
from mugraph.stages.fragments import FragmentError, Part, Split


def _fit(part: Part, graph: KernelGraph, g: KernelGraph, env: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Inline `graph` for `part`; its outputs must have the part's names, shapes and dtypes."""
    names = [str(op.attr("name")) for op in graph.ops_of(OpKind.OUTPUT)]
    what = f"stitch: the μGraph chosen for fragment {part.name}"
    if sorted(names) != sorted(part.outputs):
        raise FragmentError(f"{what} has outputs {names}; the fragment's outputs are {list(part.outputs)}")
    try:
        outs = inline(g, graph, {s: env[s] for s in part.sources}, part.name)
    except MugraphError as e:
        raise FragmentError(f"{what} does not fit: {e}") from e
    for name, want in zip(part.outputs, part.graph.output_tensors, strict=True):
        t = outs[name]
        if (t.shape, t.dtype) != (want.shape, want.dtype):
            raise FragmentError(
                f"{what}: its output {name!r} is {fmt(t.shape)} {t.dtype}; "
                f"the fragment's is {fmt(want.shape)} {want.dtype}"
            )
    return outs


def stitch(split: Split, chosen: Mapping[str, KernelGraph]) -> KernelGraph:
    """One program: the split program's inputs, then every part in order, each fragment replaced
    by `chosen[name]` (matched by input and output names; its own reference where absent)."""
    unknown = sorted(set(chosen) - {f.name for f in split.fragments})
    if unknown:
        raise FragmentError(f"stitch: no fragment named {unknown}; fragments are {[f.name for f in split.fragments]}")
    g = KernelGraph(split.program.limits)
    env = {n: g.new_input(s, d, n) for n, s, d in split.program.input_signature()}
    for part in split.parts:
        outs = _fit(part, chosen.get(part.name, part.graph), g, env)
        env.update({f"{part.name}:{o}": outs[o] for o in part.outputs})
    for name, src in split.outputs:
        g.mark_output(env[src], name)
    return g
