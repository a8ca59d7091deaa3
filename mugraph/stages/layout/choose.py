"""Choose every tensor's layout of a μGraph with `z3.Optimize` over one-hot choices.

Booleans `inner[t][d]` (tensor t has innermost dim d) and, for shared-memory tensors, `swz[t][d]`
(t swizzles dim d). Hard rules are constraints; each cost term of `costs.py` is a weighted soft
constraint, so the optimum minimises their sum. A second, lexicographically weaker objective prefers
row-major (last dim innermost) and swizzles among the last two dims, which only breaks ties. Each
solve gets its own Z3 context with a fixed seed, so the same μGraph gives the same layouts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import z3

from mugraph.ir.graph import KernelGraph
from mugraph.stages.layout.costs import (
    ASYNC_COPY_BYTES,
    LAYOUT_SCHEMA,
    LDMATRIX_ELEMENTS,
    PAD_BYTES_PER_ROW,
    WEIGHTS,
    WIDE_COPY_BYTES,
    Layouts,
    LayoutsJSON,
    cost_terms,
    row_bytes,
    violations,
)
from mugraph.stages.layout.facts import KERNEL, Copy, LayoutError, LayoutFacts, TensorKey, gather

COST, TIE = "cost", "tie"


class LayoutResultJSON(TypedDict):
    """`LayoutResult` as JSON: what a worker's layout record holds when a layout was found."""

    schema: str
    layouts: LayoutsJSON
    terms: dict[str, int]
    objective: int
    solve_seconds: float
    io_layouts: dict[str, int]


@dataclass(frozen=True, slots=True)
class LayoutResult:
    layouts: Layouts
    terms: dict[str, int]  # weighted cost of each term
    objective: int  # their sum
    solve_seconds: float
    io_layouts: dict[str, int] = field(default_factory=dict)  # the user's strides it was solved for

    def to_json(self) -> LayoutResultJSON:
        return {
            "schema": LAYOUT_SCHEMA,
            "layouts": self.layouts.to_json(),
            "terms": dict(self.terms),
            "objective": self.objective,
            "solve_seconds": round(self.solve_seconds, 6),
            "io_layouts": dict(sorted(self.io_layouts.items())),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LayoutResult:
        if data.get("schema") != LAYOUT_SCHEMA:
            raise LayoutError(f"layout record of schema {data.get('schema')!r}; expected {LAYOUT_SCHEMA}")
        if "error" in data:
            raise LayoutError(str(data["error"]))
        return cls(
            Layouts.from_json(data["layouts"]),
            {k: int(v) for k, v in data["terms"].items()},
            int(data["objective"]),
            float(data["solve_seconds"]),
            {k: int(v) for k, v in data.get("io_layouts", {}).items()},
        )


class _Problem:
    def __init__(self, facts: LayoutFacts) -> None:
        self.facts = facts
        self.ctx = z3.Context()
        self.opt = z3.Optimize(ctx=self.ctx)
        self.opt.set("maxsat_engine", "maxres")
        self.inner: dict[TensorKey, list[z3.BoolRef]] = {}
        self.swz: dict[TensorKey, list[z3.BoolRef]] = {}
        for key, shape in sorted(facts.shapes.items()):
            name = f"{key[0]}_{key[1]}"
            self.inner[key] = [z3.Bool(f"i{name}_{d}", self.ctx) for d in range(len(shape))]
            self.opt.add(z3.PbEq([(b, 1) for b in self.inner[key]], 1))
            if facts.is_block(key):
                self.swz[key] = [z3.Bool(f"s{name}_{d}", self.ctx) for d in range(len(shape))]
                self.opt.add(z3.PbLe([(b, 1) for b in self.swz[key]], 1))
                for d in range(len(shape)):
                    self.opt.add(z3.Implies(self.swz[key][d], z3.Not(self.inner[key][d])))

    def same(self, a: TensorKey, b: TensorKey) -> z3.BoolRef:
        """Both tensors have the same innermost dim."""
        return z3.Or([z3.And(x, y) for x, y in zip(self.inner[a], self.inner[b], strict=True)])

    def along(self, c: Copy, multiple: int) -> z3.BoolRef:
        """The copy reads contiguous rows of a multiple of `multiple` bytes."""
        s, t = self.inner[c.stensor], self.inner[c.dtensor]
        ok = [z3.And(s[d], t[d]) for d in range(len(s)) if row_bytes(self.facts, c.stensor, d) % multiple == 0]
        return z3.Or(ok) if ok else z3.BoolVal(False, self.ctx)

    def soft(self, cond: z3.BoolRef, weight: int, group: str = COST) -> None:
        if weight > 0:
            self.opt.add_soft(cond, weight, group)

    def build(self) -> None:
        f, opt = self.facts, self.opt
        for key, d in sorted(f.fixed.items()):
            opt.add(self.inner[key][d])
        for key in f.last_two:
            opt.add(z3.Or(self.inner[key][-2:]))
        for a, b in f.same_inner:
            opt.add(self.same(a, b))
        for key, d in f.reductions:
            self.soft(z3.Not(self.inner[key][d]), WEIGHTS["reduction_over_inner"])
        for c in f.copies:
            self.soft(self.along(c, WIDE_COPY_BYTES), WEIGHTS["narrow_copy"])
            if c.direction == "input":
                self.soft(self.along(c, ASYNC_COPY_BYTES), WEIGHTS["no_async_copy"])
        for key in f.mm_operands:
            ok = [b for d, b in enumerate(self.inner[key]) if f.shapes[key][d] % LDMATRIX_ELEMENTS == 0]
            self.soft(z3.Or(ok) if ok else z3.BoolVal(False, self.ctx), WEIGHTS["no_ldmatrix"])
        for key in sorted(self.swz):
            self.soft(z3.Not(z3.Or(self.swz[key])), WEIGHTS["swizzle"])
        for key in sorted(set(f.mm_operands)):
            swizzled = z3.Or(self.swz[key])
            for d, b in enumerate(self.inner[key]):
                pad = f.rows(key, d) * PAD_BYTES_PER_ROW * WEIGHTS["smem_bytes"]
                self.soft(z3.Or(z3.Not(b), swizzled), pad)
        # ties: row-major first, then swizzles among the last two dims
        for key in sorted(self.inner):
            self.soft(self.inner[key][-1], 1, TIE)
        for key in sorted(self.swz):
            for b in self.swz[key][:-2]:
                self.soft(z3.Not(b), 1, TIE)

    def solve(self) -> Layouts:
        if self.opt.check() != z3.sat:
            raise LayoutError(
                "no layout satisfies the μGraph's rules (user strides against a matmul "
                "or an op that keeps its input's innermost dim)"
            )
        m = self.opt.model()

        def pick(bits: list[z3.BoolRef]) -> int:
            chosen = [d for d, b in enumerate(bits) if z3.is_true(m.eval(b, model_completion=True))]
            return chosen[0] if chosen else -1

        kernel = {i: pick(bits) for (op, i), bits in self.inner.items() if op == KERNEL}
        blocks: dict[int, dict[int, tuple[int, int]]] = {}
        for (op, i), bits in self.inner.items():
            if op != KERNEL:
                blocks.setdefault(op, {})[i] = (pick(bits), pick(self.swz[(op, i)]))
        return Layouts(
            tuple(kernel[i] for i in sorted(kernel)),
            {op: tuple(ts[i] for i in sorted(ts)) for op, ts in sorted(blocks.items())},
        )


def choose_layouts(graph: KernelGraph, io_layouts: Mapping[str, int] | None = None) -> LayoutResult:
    """The cheapest layouts of `graph` under the cost terms of `costs.py`. `io_layouts` maps input
    and output names to the user's innermost dim (default: row-major)."""
    t0 = time.perf_counter()
    facts = gather(graph, io_layouts)
    problem = _Problem(facts)
    problem.build()
    layouts = problem.solve()
    broken = violations(facts, layouts)
    if broken:  # the encoding and the rules disagree: never hand such layouts on
        raise AssertionError(f"solver layouts break rules: {broken}")
    terms = cost_terms(facts, layouts)
    return LayoutResult(layouts, terms, sum(terms.values()), time.perf_counter() - t0, dict(io_layouts or {}))
