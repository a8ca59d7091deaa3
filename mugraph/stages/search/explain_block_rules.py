"""The rule that leaves the expert's next step inside an open block graph out, with the setting that
would admit it: for-loop range, fmaps, block op count and kinds, omaps, block outputs, canonical order
or memory."""

from __future__ import annotations

from mugraph.ir.types import COMMUTATIVE_OPS, OpKind
from mugraph.stages.search import candidates as C
from mugraph.stages.search.config import SEARCHABLE_BLOCK_OPS
from mugraph.stages.search.expert_target import BlockTarget, Sig, block_sigs, kernel_sigs
from mugraph.stages.search.explain_dead_ends import DeadEnds, op_not_listed, setting_list
from mugraph.stages.search.state import TYPE_ORDER, State
from mugraph.stages.search.task_paths import Path


def loop_rule(ends: DeadEnds, path: Path, state: State, bt: BlockTarget) -> None:
    cfg, b = ends.cfg, state.block
    assert b is not None
    ks = kernel_sigs(state)
    fmap_of = {src: f for src, _, f in bt.inputs}
    fmaps = [fmap_of[ks[i]] for i in b.sources]
    split = any(f >= 0 for f in fmaps)
    if split and bt.forloop not in cfg.franges:
        ends.dead(
            path,
            "for-loop range",
            f"the expert's for-loop range {bt.forloop} is not among the ranges {list(cfg.franges)}",
            setting_list("franges", cfg.franges, bt.forloop),
        )
        return
    bad = [f for f in fmaps if f >= 0 and f not in cfg.fmaps]
    if bad:
        ends.dead(
            path,
            "fmaps",
            f"the expert's fmap {bad[0]} is not among the fmaps {list(cfg.fmaps)}",
            setting_list("fmaps", cfg.fmaps, bad[0]),
        )
        return
    if not split and bt.forloop != 1:
        ends.dead(
            path,
            "for-loop range",
            f"the expert loops {bt.forloop} times over inputs the loop does not split; the search uses range 1 there",
            None,
        )
        return
    ends.dead(
        path,
        "memory",
        f"the expert's block inputs (fmaps {fmaps}, for-loop range {bt.forloop}) do not "
        "fit in shared memory, or the range does not divide a split dim",
        None,
    )


def block_rule(ends: DeadEnds, path: Path, state: State, ks: list[Sig], bt: BlockTarget) -> None:
    cfg, b = ends.cfg, state.block
    assert b is not None
    bs = block_sigs(b, ks)
    have = set(bs)
    ready = [op for op in bt.ops if op[2] not in have and set(op[1]) <= have and op[0] is not OpKind.CONCAT]
    ready += [
        op for op in bt.ops if op[2] not in have and op[0] is OpKind.MATMUL and any(a not in have for a in op[1])
    ]  # a matmul of concatenations: the lora macro
    if not ready:
        _close_rule(ends, path, state, bt, bs)
        return
    kind, args, _ = ready[0]
    what = f"block {kind}"
    if b.op_count >= cfg.max_block_ops:
        ends.dead(
            path,
            "op count",
            f"the expert's block graph has {bt.op_count} block ops counting its "
            f"inputs, max_block_ops is {cfg.max_block_ops}",
            f"max_block_ops={bt.op_count}",
        )
        return
    if any(a not in have for a in args):
        if not cfg.concat_matmul:
            ends.dead(
                path,
                "block ops",
                "the expert concatenates block tensors, which the search does only as "
                "the lora preset's concat-then-matmul",
                "concat_matmul=true",
            )
        else:
            ends.dead(
                path, "block ops", "the expert's concatenations are not a concat-then-matmul the search lists", None
            )
        return
    if kind not in cfg.block_ops:
        ends.dead(path, "block ops", *op_not_listed("block_ops", what, kind, cfg.block_ops, SEARCHABLE_BLOCK_OPS))
        return
    ins = tuple(bs.index(a) for a in args)
    key = tuple(sorted(ins)) if kind in COMMUTATIVE_OPS else ins
    if (key, TYPE_ORDER[kind]) <= b.last:
        ends.order(path, state, f"{kind}({','.join(map(str, ins))})")
        return
    ends.dead(path, "memory", f"the expert's {what} does not fit in shared memory", None)


def _close_rule(ends: DeadEnds, path: Path, state: State, bt: BlockTarget, bs: list[Sig]) -> None:
    cfg, b = ends.cfg, state.block
    assert b is not None
    n = len(bt.outputs)
    if n > cfg.max_block_outputs:
        ends.dead(
            path,
            "block outputs",
            f"the expert's block graph has {n} outputs, max_block_outputs is {cfg.max_block_outputs}",
            f"max_block_outputs={n}",
        )
        return
    omaps = {m for _, m in bt.outputs}
    if len(omaps) > 1:
        ends.dead(
            path,
            "omaps",
            "the expert's block outputs use different omaps; the search closes a block "
            "graph with one omap for all of its outputs",
            None,
        )
        return
    omap = omaps.pop()
    rank = min(len(b.tensors[bs.index(s)].shape) for s, _ in bt.outputs)
    if omap not in C.omap_candidates(b.grid, rank, cfg):
        ends.dead(
            path,
            "omaps",
            f"the expert's omap {list(omap)} is not a candidate for grid {list(b.grid)}",
            setting_list("omaps", cfg.omaps, omap),
        )
        return
    dangling = {bs[i] for i in range(len(b.inputs), len(b.tensors)) if b.uses[i] == 0}
    outputs = {s for s, _ in bt.outputs}
    if dangling != outputs:
        what = "outputs a tensor that it also reads" if outputs - dangling else "leaves a computed tensor unread"
        ends.dead(
            path,
            "block outputs",
            f"the search makes exactly the block tensors nothing reads its outputs; the expert's block graph {what}",
            None,
        )
        return
    ends.dead(path, "memory", "the expert's block outputs do not fit in device memory", None)
