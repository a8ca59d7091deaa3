"""Finite models of Mirage's subexpression axioms: sound "not a subexpression" answers without Z3.

If some interpretation of the term functions and of `sub` satisfies every axiom (z3_encoding.py)
while `sub(candidate, output)` is false for every output, then the axioms do not entail that the
candidate is a subexpression: Z3 can only answer sat or unknown, both of which prune. Each model
below is such an interpretation, cheap to evaluate on hash-consed terms; a candidate refuted by
any of them is answered `N` with no solver call. None ever refutes a provable candidate (the
contract tests in tests/stages/prune/test_models.py check every axiom on random terms).

Every model interprets `sum` as the identity. That satisfies each sum equation and the
partial-sum lemma, and it loses nothing: since `x ⊑ sum(i, x)` holds for every integer i and
`sum(-i, sum(i, x)) = x`, the axioms make x and sum(i, x) subexpressions of each other anyway.

**Head sets.** A term is the set of its heads other than `sum`, and its variables; `sub` is set
inclusion. Every equation among the axioms has the same heads other than `sum` and the same
variables on both sides, and every `⊑` axiom only adds heads.

**Counted monomials.** A term is a polynomial with positive integer coefficients over atoms (the
variables, and one atom per unary head and for `rms`): add and concat add, mul and div multiply
(div is a product here: the model need not tell them apart, only satisfy the axioms), a unary op
or rms multiplies by its atom. `sub(a, b)` holds when one monomial k maps every monomial m of `a`
to a monomial m·k of `b` whose coefficient is at least m's. Positive polynomials form a
commutative semiring, so the add/mul/div equations hold; `x ⊑ add(x, y)` with k = 1 because
coefficients only grow, `x ⊑ mul(x, y)` with k any monomial of y (coefficients ≥ 1, and no
cancellation); `sub` is reflexive (k = 1) and transitive (k·k'); distinct variables are distinct
monomials and none is another times a monomial. It refutes the square of an input that
appears once in each product of the output (`X·X`, `W·A` against `X·W + X·A·B`), and a doubled
term where the output has each product once (`X + X`, `X·W + X·W`).

**Nested atoms.** As the monomials without coefficients, but a unary op, rms (per encoded degree)
or a divisor of a value M is one atom `h[M]` that remembers its argument (div(x, y) = x·`/[y]`).
`sub(a, b)` holds when one monomial k maps a into b (a·k ⊆ b), or some monomial of b holds an
atom `h[M]` with `sub(a, M)`. `x ⊑ h(x)` and `y ⊑ div(x, y)` hold through the atom, `x ⊑ div(x,
y)` with k the atom; `⊑` is transitive (by induction on the nesting), and the equations hold as
for the monomials since the atoms are functions of values. It refutes what leaves an exp's argument behind: `exp(Q)`,
`Q·Q` or `K·V` against `exp(Q·K) / Σ exp(Q·K) · V`, which the flat atoms cannot tell apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from mugraph.stages.prune.expr import Expr, Head
from mugraph.stages.prune.z3_encoding import log_degree

Monomial = tuple[tuple[str, int], ...]  # sorted (atom, power) pairs
Polynomial = tuple[tuple[Monomial, int], ...]  # sorted (monomial, coefficient) pairs
V = TypeVar("V")


class FiniteModel(Protocol[V]):
    """An interpretation of the axioms' terms (`value`) and of `sub` that satisfies them all."""

    name: str

    def value(self, e: Expr) -> V: ...

    def sub(self, a: V, b: V) -> bool: ...


def _times(a: Monomial, b: Monomial) -> Monomial:
    powers = dict(a)
    for atom, n in b:
        powers[atom] = powers.get(atom, 0) + n
    return tuple(sorted(powers.items()))


def _divides(a: Monomial, b: Monomial) -> bool:
    powers = dict(b)
    return all(powers.get(atom, 0) >= n for atom, n in a)


def _quotient(n: Monomial, m: Monomial) -> Monomial:
    """n / m, for m dividing n."""
    powers = dict(n)
    for atom, k in m:
        powers[atom] -= k
    return tuple(sorted((atom, k) for atom, k in powers.items() if k))


def _scaled_into(a: frozenset[Monomial], b: frozenset[Monomial]) -> bool:
    """Whether some monomial k maps every monomial of a into b (a·k ⊆ b)."""
    m0 = min(a)
    return any(all(_times(m, k) in b for m in a) for k in (_quotient(n, m0) for n in b if _divides(m0, n)))


class HeadSets:
    name = "heads"

    def __init__(self) -> None:
        self._seen: dict[Expr, frozenset[str]] = {}

    def value(self, e: Expr) -> frozenset[str]:
        found = self._seen.get(e)
        if found is None:
            own = frozenset() if e.head == Head.SUM else frozenset({e.sexpr if e.head == Head.VAR else e.head})
            found = own.union(*(self.value(a) for a in e.args))
            self._seen[e] = found
        return found

    def sub(self, a: frozenset[str], b: frozenset[str]) -> bool:
        return a <= b


class CountedMonomials:
    name = "monomials"

    def __init__(self) -> None:
        self._seen: dict[Expr, Polynomial] = {}

    def value(self, e: Expr) -> Polynomial:
        found = self._seen.get(e)
        if found is not None:
            return found
        h = e.head
        terms: dict[Monomial, int] = {}
        if h == Head.VAR:
            terms[((e.sexpr, 1),)] = 1
        elif h == Head.SUM:
            terms.update(self.value(e.args[0]))
        elif h in (Head.ADD, Head.CONCAT):
            for arg in e.args:
                for m, c in self.value(arg):
                    terms[m] = terms.get(m, 0) + c
        elif h in (Head.MUL, Head.DIV):
            right = self.value(e.args[1])
            for m, c in self.value(e.args[0]):
                for n, d in right:
                    mn = _times(m, n)
                    terms[mn] = terms.get(mn, 0) + c * d
        else:  # a unary head or rms: one atom named by the head
            atom: Monomial = ((h, 1),)
            for m, c in self.value(e.args[-1]):
                terms[_times(m, atom)] = c
        found = self._seen[e] = tuple(sorted(terms.items()))
        return found

    def sub(self, a: Polynomial, b: Polynomial) -> bool:
        coeffs = dict(b)
        m0, c0 = a[0]  # every k that maps a into b maps this monomial to a multiple in b
        for n, d in b:
            if d >= c0 and _divides(m0, n):
                k = _quotient(n, m0)
                if all(coeffs.get(_times(m, k), 0) >= c for m, c in a):
                    return True
        return False


class NestedAtoms:
    name = "nested"

    def __init__(self) -> None:
        self._seen: dict[Expr, frozenset[Monomial]] = {}
        self._atoms: dict[tuple[str, frozenset[Monomial]], str] = {}  # (head, argument) → atom
        self._inner: dict[str, frozenset[Monomial]] = {}  # atom → its argument's value
        self._under: dict[tuple[frozenset[Monomial], frozenset[Monomial]], bool] = {}

    def value(self, e: Expr) -> frozenset[Monomial]:
        found = self._seen.get(e)
        if found is not None:
            return found
        h = e.head
        if h == Head.VAR:
            found = frozenset({((e.sexpr, 1),)})
        elif h == Head.SUM:
            found = self.value(e.args[0])
        elif h in (Head.ADD, Head.CONCAT):
            found = self.value(e.args[0]) | self.value(e.args[1])
        elif h == Head.MUL:
            right = self.value(e.args[1])
            found = frozenset(_times(a, b) for a in self.value(e.args[0]) for b in right)
        elif h == Head.DIV:  # the dividend times one atom holding the divisor
            divisor = self._atom(h, self.value(e.args[1]))
            found = frozenset(_times(a, divisor) for a in self.value(e.args[0]))
        else:  # a unary op, or rms of a given degree: one atom holding its argument
            tag = f"{h}{log_degree(e.param[0])}" if h == Head.RMS else h
            found = frozenset({self._atom(tag, self.value(e.args[-1]))})
        self._seen[e] = found
        return found

    def _atom(self, tag: str, inner: frozenset[Monomial]) -> Monomial:
        atom = self._atoms.get((tag, inner))
        if atom is None:
            atom = self._atoms[(tag, inner)] = f"{tag}#{len(self._atoms)}"
            self._inner[atom] = inner
        return ((atom, 1),)

    def sub(self, a: frozenset[Monomial], b: frozenset[Monomial]) -> bool:
        key = (a, b)
        found = self._under.get(key)
        if found is None:
            found = _scaled_into(a, b) or any(
                self.sub(a, self._inner[atom]) for atom in {x for n in b for x, _ in n if x in self._inner}
            )
            self._under[key] = found
        return found


def all_models() -> list[FiniteModel[object]]:
    """A fresh instance of every model, cheapest first."""
    return [HeadSets(), CountedMonomials(), NestedAtoms()]  # type: ignore[list-item]


class Refuter:
    """Every model against one reference's output terms; `refutes(c)` is true when some model
    shows `c` is a subexpression of no output."""

    def __init__(self, finals: Sequence[Expr]) -> None:
        self.models = all_models()
        self._finals = [[m.value(f) for f in finals] for m in self.models]

    def refuted_by(self, name: str, c: Expr) -> bool:
        i = next(i for i, m in enumerate(self.models) if m.name == name)
        return self._refuted(i, c)

    def _refuted(self, i: int, c: Expr) -> bool:
        model = self.models[i]
        value = model.value(c)
        return not any(model.sub(value, f) for f in self._finals[i])

    def refutes(self, c: Expr) -> bool:
        return any(self._refuted(i, c) for i in range(len(self.models)))
