"""Mirage's subexpression axioms in Z3, and the encoding of abstract expressions into them.

A query asks whether a candidate is a subexpression of one of a reference's outputs: the axioms, and
not(sub(candidate, output) for some output); `unsat` means it is. Limits are Z3's deterministic
resource limit (rlimit), never a wall-clock timeout.

Each query runs in a fresh Z3 context (`SubQueries.check`). Z3's answer at the rlimit depends on
what its context and solver saw before (term ids, instantiations and learned state survive
push/pop): three earlier queries turn one `unknown` into `unsat` (tests/stages/prune/test_oracle.py).
Verdicts are cached and shared by every worker, so each must be a function of the query alone, or
the μGraphs found would depend on which worker asked first. The axioms are built once per reference
through Z3's API and kept as SMT-LIB text; a query appends its goal to that text and Z3 parses it
into the new context. On rms_norm's queries that costs about 9 ms a check more than a reused
solver (20 → 29 ms): 3-4 ms for the context and the parse, the rest Z3 preparing the quantified
axioms again (benchmarks/RESULTS.md, fifth round).

Axioms (reference/mirage-search.md §3): sub is reflexive and transitive; x ⊑ add(x, y),
mul(x, y), div(x, y); y ⊑ div(x, y); x ⊑ every unary op of x, rms(i, x), sum(i, x), concat parts;
add and mul are commutative and associative; mul distributes over add; div-add; mul-div;
sum(0, x) = x; nested sums add degrees; sums distribute over add of sums; sum(i, mul(x, y)) =
mul(sum(i, x), y) and the same for div; and i1 ≤ i2 → sum(i1, x) ⊑ sum(i2, x) (partial sums).
Degrees are stored as ceil(log2(n)), as Mirage does, so nesting adds them.

A norm with eps is its own function: rms with eps E is `rms_eps(i, E, x)` and layer_norm is
`layer_norm(n, E, x)`, both with x ⊑ f(·, ·, x) and nothing else (a weaker theory is sound: a
subexpression is never refuted for want of an axiom the reference's own term does not use). Like
gelu_erf, they are declared only in queries whose terms use them, so every other query keeps its text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import z3

from mugraph.stages.prune.expr import Expr, Head
from mugraph.stages.prune.heap import keep_context_memory

AXIOM_VERSION = "mirage-sub/1"
Z3_VERSION = z3.get_version_string()

_UNARY = (Head.EXP, Head.SQRT, Head.SILU, Head.GELU, Head.RELU, Head.CLAMP)
# Declared only in queries whose terms use it, so every other query keeps its exact text.
_ERF_UNARY = (*_UNARY, Head.GELU_ERF)
# Norms with eps, each declared (with its one axiom) only where a term uses it, as gelu_erf is.
RMS_EPS = "rms_eps"
_OPTIONAL = (RMS_EPS, Head.LAYER_NORM)
# Z3's names for the binary heads; every other head is declared under its own name (Head.SUM is
# "sum", ...), so `_Axioms` and `smt_term` spell each symbol the same way.
_BINARY = {Head.ADD: "add", Head.MUL: "mul", Head.DIV: "div"}


def log_degree(n: int) -> int:
    return max(0, math.ceil(math.log2(n)))


class _Axioms:
    """The function symbols, the inputs and the axioms over them, in one Z3 context."""

    def __init__(
        self, ctx: z3.Context, n_inputs: int, unary: Sequence[str] = _UNARY, optional: Sequence[str] = ()
    ) -> None:
        self.ctx = ctx
        P = z3.DeclareSort("P", ctx)
        Int = z3.IntSort(ctx)
        self.P = P
        f = z3.Function
        self.add = f(_BINARY[Head.ADD], P, P, P)
        self.mul = f(_BINARY[Head.MUL], P, P, P)
        self.div = f(_BINARY[Head.DIV], P, P, P)
        self.red = f(Head.SUM, Int, P, P)
        self.rms = f(Head.RMS, Int, P, P)
        self.concat = f(Head.CONCAT, Int, Int, P, P, P)
        self.unary = {h: f(h, P, P) for h in unary}
        self.tagged = {h: f(h, Int, Int, P, P) for h in _OPTIONAL if h in optional}  # (degree, eps bits, x)
        self.sub = f("sub", P, P, z3.BoolSort(ctx))
        self.vars = [z3.Const(f"v{i}", P) for i in range(n_inputs)]

    def smt_text(self) -> str:
        """Every declaration (inputs included, used in an axiom or not) and every axiom, in SMT-LIB."""
        decls = [
            self.sub,
            self.add,
            self.mul,
            self.div,
            self.red,
            self.rms,
            self.concat,
            *self.unary.values(),
            *(v.decl() for v in self.vars),
            *self.tagged.values(),
        ]
        lines = ["(declare-sort P 0)"]
        for d in decls:
            domain = " ".join(d.domain(i).sexpr() for i in range(d.arity()))
            lines.append(f"(declare-fun {d.name()} ({domain}) {d.range().sexpr()})")
        lines += [f"(assert {a.sexpr()})" for a in self._axioms()]
        return "\n".join(lines) + "\n"

    def _axioms(self) -> list[Any]:
        ctx, P, sub = self.ctx, self.P, self.sub
        add, mul, div, red, rms = self.add, self.mul, self.div, self.red, self.rms
        x, y, z = (z3.Const(n, P) for n in "xyz")
        i, i1, i2 = (z3.Int(n, ctx) for n in ("i", "i1", "i2"))
        fa = z3.ForAll
        ax = [
            fa([x], sub(x, x)),
            fa([x, y, z], z3.Implies(z3.And(sub(x, y), sub(y, z)), sub(x, z))),
            fa([x, y], sub(x, add(x, y))),
            fa([x, y], sub(x, mul(x, y))),
            fa([x, y], sub(x, div(x, y))),
            fa([x, y], sub(y, div(x, y))),
            fa([i, x], sub(x, rms(i, x))),
            fa([i, x], sub(x, red(i, x))),
            fa([i, i1, x, y], z3.And(sub(x, self.concat(i, i1, x, y)), sub(y, self.concat(i, i1, x, y)))),
            fa([x, y], add(x, y) == add(y, x)),
            fa([x, y], mul(x, y) == mul(y, x)),
            fa([x, y, z], add(add(x, y), z) == add(x, add(y, z))),
            fa([x, y, z], mul(mul(x, y), z) == mul(x, mul(y, z))),
            fa([x, y, z], add(mul(x, z), mul(y, z)) == mul(add(x, y), z)),
            fa([x, y, z], add(div(x, z), div(y, z)) == div(add(x, y), z)),
            fa([x, y, z], mul(x, div(y, z)) == div(mul(x, y), z)),
            fa([x], red(0, x) == x),
            fa([i1, i2, x], red(i1, red(i2, x)) == red(i1 + i2, x)),
            fa([i, i1, i2, x, y], red(i, add(red(i1, x), red(i2, y))) == add(red(i + i1, x), red(i + i2, y))),
            fa([i, x, y], red(i, mul(x, y)) == mul(red(i, x), y)),
            fa([i, x, y], red(i, div(x, y)) == div(red(i, x), y)),
            fa([i1, i2, x], z3.Implies(i1 <= i2, sub(red(i1, x), red(i2, x)))),
        ]
        ax += [fa([x], sub(x, u(x))) for u in self.unary.values()]
        ax += [fa([i, i1, x], sub(x, t(i, i1, x))) for t in self.tagged.values()]
        if len(self.vars) > 1:
            ax.append(z3.Distinct(*self.vars))
        ax += [z3.Not(sub(a, b)) for a in self.vars for b in self.vars if a is not b]
        return ax


def _uses_erf(text: str) -> bool:
    return f"({Head.GELU_ERF} " in text


def _optional_heads(text: str) -> frozenset[str]:
    return frozenset(h for h in _OPTIONAL if f"({h} " in text)


def smt_term(e: Expr) -> str:
    """A term in the axioms' SMT-LIB vocabulary (sum and rms degrees as ceil(log2(n)))."""
    h = e.head
    if h == Head.VAR:
        return f"v{e.param[0]}"
    args = " ".join(smt_term(a) for a in e.args)
    if h in _BINARY:
        return f"({_BINARY[h]} {args})"
    if h == Head.RMS and len(e.param) == 2:
        return f"({RMS_EPS} {log_degree(e.param[0])} {e.param[1]} {args})"
    if h in (Head.SUM, Head.RMS):
        return f"({h} {log_degree(e.param[0])} {args})"
    if h == Head.LAYER_NORM:
        return f"({h} {e.param[0]} {e.param[1]} {args})"
    if h == Head.CONCAT:
        return f"(concat {e.param[0]} {e.param[1]} {args})"
    return f"({h} {args})"


class SubQueries:
    """Subexpression queries against one reference's output terms, each in a fresh context."""

    def __init__(self, finals: Sequence[Expr], n_inputs: int, rlimit: int, mbqi: bool):
        keep_context_memory()  # or each fresh context faults its 16 MiB in again (heap.py)
        self.rlimit = rlimit
        self.mbqi = mbqi
        self.n_inputs = n_inputs
        self.finals = [smt_term(e) for e in finals]
        self.erf = any(_uses_erf(f) for f in self.finals)
        self.optional = frozenset().union(*(_optional_heads(f) for f in self.finals))
        self.prologue = self._prologue(self.erf, self.optional)

    def _prologue(self, erf: bool, optional: frozenset[str] = frozenset()) -> str:
        return _Axioms(z3.Context(), self.n_inputs, _ERF_UNARY if erf else _UNARY, sorted(optional)).smt_text()

    def goal(self, candidate: Expr) -> str:
        """The query's own assertion: the candidate is a subexpression of no output."""
        c = smt_term(candidate)
        subs = [f"(sub {c} {f})" for f in self.finals]
        return "(assert (not " + (subs[0] if len(subs) == 1 else "(or " + " ".join(subs) + ")") + "))\n"

    def text(self, candidate: Expr) -> str:
        """The whole query in SMT-LIB (declarations, axioms, goal), to log or hand to another solver."""
        goal = self.goal(candidate)
        erf = self.erf or _uses_erf(goal)  # a candidate may use what the reference has not
        optional = self.optional | _optional_heads(goal)
        if erf != self.erf or optional != self.optional:
            return self._prologue(erf, optional) + goal
        return self.prologue + goal

    def check(self, candidate: Expr) -> str:
        """'unsat' (a subexpression), 'sat' (not one) or 'unknown' (the resource limit hit)."""
        solver = z3.Solver(ctx=z3.Context())
        solver.set("rlimit", self.rlimit)
        solver.set("mbqi", self.mbqi)
        solver.from_string(self.text(candidate))
        return str(solver.check())
