"""Small wrong variants of a μGraph (a map, an accumulator, a matmul's operands changed), which
verification must tell apart from it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import from_json, to_json
from tests.helpers.builtin import PROGRAMS

MAPS = [
    (-1, -1, -1),
    (0, -1, -1),
    (1, -1, -1),
    (0, 1, -1),
    (0, 2, -1),
    (0, -1, 1),
    (-1, 2, 1),
    (-1, 1, -1),
    (0, 2, 1),
    (1, 0, -1),
    (2, -1, -1),
]


ACCUMS = ["accum_no_red", "accum_sum", "accum_mean", "accum_rms", "accum_redtox"]


Mutant = tuple[str, str, dict[str, Any]]


def _block_ops(g: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for i, op in enumerate(g["ops"]):
        if op["kind"] == "customized":
            for j, bop in enumerate(op["block"]["ops"]):
                yield f"ops[{i}].block.ops[{j}]", bop


def mutants(graph: KernelGraph) -> Iterator[Mutant]:
    base = to_json(graph)

    def variant(where: str, key: str, value: Any) -> dict[str, Any]:
        g = copy.deepcopy(base)
        target = dict(_block_ops(g)).get(where) or g["ops"][int(where[4:-1])]
        target[key] = value
        return g

    for where, op in _block_ops(base):
        if op["kind"] == "input":
            for m in MAPS:
                if list(m) != op["imap"]:
                    yield "imap", f"{where} imap={m}", variant(where, "imap", list(m))
            for f in (-1, 0, 1, 2):
                if f != op.get("fmap", -1):
                    yield "fmap", f"{where} fmap={f}", variant(where, "fmap", f)
        elif op["kind"] == "output":
            for m in MAPS:
                if list(m) != op["omap"]:
                    yield "omap", f"{where} omap={m}", variant(where, "omap", list(m))
        elif op["kind"].startswith("accum_"):
            for acc in ACCUMS:
                if acc != op["kind"]:
                    yield "accumulator", f"{where} {acc}", variant(where, "kind", acc)
        if op["kind"] == "matmul":
            yield "matmul_swap", f"{where} swapped", variant(where, "inputs", op["inputs"][::-1])
    for i, op in enumerate(base["ops"]):
        if op["kind"] == "matmul":
            yield "matmul_swap", f"ops[{i}] swapped", variant(f"ops[{i}]", "inputs", op["inputs"][::-1])


def experts_and_mutants(name: str) -> list[KernelGraph]:
    """Every expert of the built-in program `name`, each followed by its mutants the IR accepts."""
    graphs = []
    for build in PROGRAMS[name].experts.values():
        expert = build()
        graphs.append(expert)
        for _, _, data in mutants(expert):
            try:
                graphs.append(from_json(data))
            except MugraphError:
                continue
    return graphs
