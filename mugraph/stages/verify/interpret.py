"""Run a kernel graph in an algebra: kernel ops directly (`op_meanings`), block graphs vectorised over
the grid (`block_graphs`)."""

from __future__ import annotations

from collections.abc import Sequence

from mugraph.ir.families import BOUNDARY
from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import OpKind
from mugraph.stages.verify import products
from mugraph.stages.verify.algebra import Algebra, Array
from mugraph.stages.verify.block_graphs import run_block
from mugraph.stages.verify.op_meanings import apply_common
from mugraph.stages.verify.reuse import ValueCache


def evaluate(alg: Algebra, graph: KernelGraph, inputs: Sequence[Array], cache: ValueCache | None = None) -> list[Array]:
    """The graph's outputs, in the order they were marked, for `inputs` in input order. With a
    cache (bound to these inputs), values an earlier graph computed are reused (reuse.py)."""
    return _evaluate(alg, graph, inputs, cache, -1)


def probe_outputs(
    alg: Algebra, graph: KernelGraph, inputs: Sequence[Array], cache: ValueCache | None = None
) -> list[Array] | None:
    """Where the graph's last computing op is a graph-defined op that makes every output: the
    tile block (0, 0, 0) of its grid writes to each output (the output's corner, from index 0 in
    every dim), in output order, everything before that op evaluated as `evaluate` does; None
    for any other graph. A candidate whose corners differ from the reference's differs from it,
    and a search's candidates mostly end so: their new block graph is the part no earlier
    candidate computed, and its grid is what costs."""
    last = max((i for i, op in enumerate(graph.ops) if op.kind not in BOUNDARY), default=-1)
    if last < 0 or graph.ops[last].kind is not OpKind.CUSTOMIZED:
        return None
    made = set(graph.ops[last].outputs)
    if not all(op.inputs[0] in made for op in graph.ops_of(OpKind.OUTPUT)):
        return None
    return _evaluate(alg, graph, inputs, cache, last)


def _evaluate(
    alg: Algebra, graph: KernelGraph, inputs: Sequence[Array], cache: ValueCache | None, probe_at: int
) -> list[Array]:
    """`evaluate`, with the graph-defined op at index `probe_at` (if any) run as a probe."""
    env: dict[int, Array] = {}
    keys: dict[int, int] = {}
    n_in = 0
    outputs: list[Array] = []
    if cache is not None:
        cache.start()
    for at, op in enumerate(graph.ops):
        match op.kind:
            case OpKind.INPUT:
                t = graph.tensors[op.outputs[0]]
                x = inputs[n_in]
                if tuple(x.shape) != t.shape:
                    raise ValueError(f"input {n_in} has shape {tuple(x.shape)}, expected {t.shape}")
                env[t.index] = x
                if cache is not None:
                    keys[t.index] = cache.key("input", n_in)
                n_in += 1
            case OpKind.OUTPUT:
                outputs.append(env[op.inputs[0]])
            case OpKind.CUSTOMIZED:
                assert op.block is not None
                args = [env[i] for i in op.inputs]
                in_keys = [keys.get(i, -1) for i in op.inputs]
                outs, out_keys = run_block(alg, op.block, args, cache, in_keys, probe=at == probe_at)
                env.update(zip(op.outputs, outs, strict=True))
                if cache is not None and at != probe_at:
                    keys.update(zip(op.outputs, out_keys, strict=True))
            case _:
                out = op.outputs[0]
                key = cache.key("kernel", op.kind, op.attrs, *(keys[i] for i in op.inputs)) if cache is not None else -1
                value = cache.get(key) if cache is not None else None
                if value is None:
                    args = [env[i] for i in op.inputs]
                    by_content = products.content_key(op, args, [keys.get(i, -1) for i in op.inputs], cache)
                    value = cache.get(by_content) if cache is not None and by_content >= 0 else None
                    if value is None:
                        value = apply_common(alg, op, args, len(graph.tensors[out].shape))
                        if cache is not None and by_content >= 0:
                            cache.put(by_content, value)
                    if cache is not None:
                        cache.put(key, value)
                env[out] = value
                keys[out] = key
    if n_in != len(inputs):
        raise ValueError(f"{len(inputs)} inputs given, the graph has {n_in}")
    return outputs
