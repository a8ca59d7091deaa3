"""The rule that leaves the expert's next kernel-level step out, with the setting that would admit it:
op count, kernel op kinds, block graph count, block inputs, grid, imaps, canonical order or memory."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from mugraph.ir.types import COMMUTATIVE_OPS, Dim3, OpKind
from mugraph.stages.search import candidates as C
from mugraph.stages.search.config import SEARCHABLE_KERNEL_OPS, ConfigError
from mugraph.stages.search.expert_target import BlockTarget, KernelStep, Sig, normalise_imap
from mugraph.stages.search.explain_dead_ends import DeadEnds, op_not_listed, setting_list
from mugraph.stages.search.state import TYPE_ORDER, State
from mugraph.stages.search.task_paths import Path


def kernel_rule(ends: DeadEnds, path: Path, state: State, ks: list[Sig]) -> None:
    cfg, have = ends.cfg, set(ks)
    ready = [s for s in ends.t.steps if not set(s.outs) <= have and set(s.ins) <= have]
    if not ready:
        ends.dead(path, "candidate", "no listed choice continues the expert", None)
        return
    step = ready[0]
    if len(state.ops) >= cfg.max_kernel_ops:
        ends.dead(
            path,
            "op count",
            f"the expert has {ends.t.kernel_ops} kernel ops counting its inputs, "
            f"max_kernel_ops is {cfg.max_kernel_ops}",
            f"max_kernel_ops={ends.t.kernel_ops}",
        )
        return
    ins = tuple(ks.index(s) for s in step.ins)
    if step.block is None:
        _predefined_rule(ends, path, state, step, ins)
    else:
        _open_rule(ends, path, state, step.block, ks)


def _predefined_rule(ends: DeadEnds, path: Path, state: State, step: KernelStep, ins: tuple[int, ...]) -> None:
    cfg = ends.cfg
    what = f"{step.kind}({','.join(ends.name(i) for i in ins)})"
    if step.kind not in cfg.kernel_ops:
        why = op_not_listed("kernel_ops", f"kernel op {what}", step.kind, cfg.kernel_ops, SEARCHABLE_KERNEL_OPS)
        ends.dead(path, "kernel ops", *why)
        return
    key = tuple(sorted(ins)) if step.kind in COMMUTATIVE_OPS else ins
    if (key, TYPE_ORDER[step.kind]) <= state.last:
        ends.order(path, state, what)
        return
    ends.dead(
        path,
        "memory",
        f"the expert's kernel op {what} does not fit in device memory beside the tensors before it",
        None,
    )


def _open_rule(ends: DeadEnds, path: Path, state: State, bt: BlockTarget, ks: list[Sig]) -> None:
    cfg = ends.cfg
    if state.n_block_graphs >= cfg.max_block_graphs:
        n = ends.t.block_graphs
        ends.dead(
            path,
            "block graphs",
            f"the expert has {n} graph-defined ops, max_block_graphs is {cfg.max_block_graphs}",
            f"max_block_graphs={n}",
        )
        return
    wanted = sorted(src for src, _, _ in bt.inputs)
    tuples = C.block_source_options(len(state.tensors), cfg)
    sources = next((o for o in tuples if sorted(ks[i] for i in o) == wanted), None)
    reads = [ends.name(ks.index(s)) for s in sorted(set(wanted), key=ks.index)]
    if sources is None:
        mirage = C.block_sources(len(state.tensors), cfg)
        given = "none" if mirage is None else ", ".join(ends.name(i) for i in mirage)
        four = len(wanted) == 4 and len(state.tensors) == 4 and not cfg.four_input_blocks
        one = len(state.tensors) == 1  # a program of one input, whose block graph subsets admits
        part = (one or (mirage is not None and set(wanted) < {ks[i] for i in mirage})) and cfg.block_inputs == "mirage"
        subsets = " or a non-empty part of them" if cfg.block_inputs == "subsets" else ""
        times = Counter(wanted)
        again = [ends.name(ks.index(s)) for s in sorted(times, key=ks.index) if times[s] > 1]
        what = (
            f"reads {', '.join(again)} more than once, but a new block graph here reads each tensor once: "
            if again
            else f"reads {', '.join(reads)}, but a new block graph here reads "
        )
        ends.dead(
            path,
            "block inputs",
            f"the expert's block graph {what}{given}{subsets} (Mirage's block-input rule: all three "
            "tensors when there are three, all four with four_input_blocks, else the last two; in a "
            "program of one input, none, where block_inputs=subsets reads that one)",
            "four_input_blocks=true" if four else "block_inputs=subsets" if part else None,
        )
        return
    if (sources, TYPE_ORDER[OpKind.CUSTOMIZED]) <= state.last:
        ends.order(path, state, f"block graph over {', '.join(reads)}")
        return
    shapes = [state.tensors[i].shape for i in sources]
    grids = C.grid_candidates(shapes, cfg)
    if bt.grid not in grids:
        shown = ", ".join(str(list(g)) for g in grids[:8]) + (", ..." if len(grids) > 8 else "")
        ends.dead(
            path,
            "grid",
            f"the expert's grid {list(bt.grid)} is not a candidate (candidates: {shown})",
            _grid_setting(ends, bt.grid, shapes),
        )
        return
    by_src = {src: m for src, m, _ in bt.inputs}
    imaps = tuple(by_src[ks[i]] for i in sources)
    options = C.imap_combos(shapes, bt.grid, cfg)
    if imaps not in options:
        allowed = {normalise_imap(m, bt.grid) for m in cfg.imaps}
        missing = next((m for m in imaps if m not in allowed), imaps[0])
        ends.dead(
            path,
            "imaps",
            f"the expert's imaps {[list(m) for m in imaps]} under grid {list(bt.grid)} are "
            f"not a candidate combination (imap {list(missing)} is not among the imaps)",
            setting_list("imaps", cfg.imaps, missing),
        )
        return
    ends.dead(path, "grid", f"no listed choice opens the expert's block graph (grid {list(bt.grid)})", None)


def _grid_setting(ends: DeadEnds, grid: Dim3, shapes: Sequence[tuple[int, ...]]) -> str:
    """The one setting, of the few that bound the grids, that makes `grid` a candidate here, tried
    on the candidates themselves; else the candidates here with `grid` added as `grids`."""
    cfg = ends.cfg
    tries: list[tuple[dict[str, Any], str]] = []
    if cfg.grids is None:
        blocks = grid[0] * grid[1] * grid[2]
        if blocks < cfg.min_blocks:
            tries.append(({"min_blocks": blocks}, f"min_blocks={blocks}"))
        if blocks > cfg.max_blocks:
            tries.append(({"max_blocks": blocks}, f"max_blocks={blocks}"))
        if grid[1:] != (1, 1) and not cfg.attention_grids:  # the attention preset's (batch, y, z) grids
            tries.append(({"attention_grids": True}, "attention_grids=true"))
        if grid[1:] == (1, 1):
            for d in sorted({d for s in shapes for d in s}):
                if d % grid[0] == 0 and d // grid[0] not in cfg.grid_divisors:
                    more = d // grid[0]
                    text = setting_list("grid_divisors", cfg.grid_divisors, more)
                    tries.append(({"grid_divisors": [*cfg.grid_divisors, more]}, text))
                    break
    for overrides, text in tries:
        try:
            admits = grid in C.grid_candidates(shapes, cfg.with_overrides(overrides))
        except ConfigError:
            continue
        if admits:
            return text
    return setting_list("grids", C.grid_candidates(shapes, cfg), grid)
