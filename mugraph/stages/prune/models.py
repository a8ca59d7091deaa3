"""Finite models of Mirage's subexpression axioms: sound "not a subexpression" answers without Z3.

If some interpretation of the term functions and of `sub` satisfies every axiom (z3_encoding.py)
while `sub(candidate, output)` is false for every output, then the axioms do not entail that the
candidate is a subexpression: Z3 can only answer sat or unknown, both of which prune. Each model
below is such an interpretation, cheap to evaluate on hash-consed terms; a candidate refuted by
either is answered `N` with no solver call. Neither ever refutes a provable candidate.

**Head sets.** A term is the set of its heads other than `sum`, and its variables; `sub` is set
inclusion. Every equation among the axioms has the same heads other than `sum` and the same
variables on both sides, and every `⊑` axiom only adds heads.

**Monomials.** A term is a finite set of monomials (multisets of atoms: the variables, and one
atom per unary head and for `rms`); `sub(a, b)` holds when every monomial of `a` divides some
monomial of `b`. add and concat are union; mul and div are the pairwise product (div is a
product here: the model need not tell them apart, only satisfy the axioms); `sum` is the
identity; a unary op or rms multiplies every monomial by its atom. Union and product are
commutative and associative and product distributes over union, so the add/mul/div equations
hold; `sum` being the identity satisfies every sum equation and the partial-sum lemma; `x ⊑
add(x, y)`, `mul`, `div` (both sides), `concat`, unary ops, `rms` and `sum` hold because `m`
divides `m·n`; `sub` is reflexive and transitive; distinct variables are distinct monomials and
none divides another. It refutes what head sets cannot: `X·X` or `W·A` against `X·W + X·A·B`,
the square of an input that appears once in each product of the output.
"""

from __future__ import annotations

from collections.abc import Sequence

from mugraph.stages.prune.expr import Expr, Head

Monomial = tuple[tuple[str, int], ...]  # sorted (atom, power) pairs


def head_set(e: Expr, seen: dict[Expr, frozenset[str]]) -> frozenset[str]:
    """Heads other than `sum`, and variables (`v0`, ...), of a term."""
    found = seen.get(e)
    if found is None:
        own = frozenset() if e.head == Head.SUM else frozenset({e.sexpr if e.head == Head.VAR else e.head})
        found = own.union(*(head_set(a, seen) for a in e.args))
        seen[e] = found
    return found


def _times(a: Monomial, b: Monomial) -> Monomial:
    powers = dict(a)
    for atom, n in b:
        powers[atom] = powers.get(atom, 0) + n
    return tuple(sorted(powers.items()))


def monomials(e: Expr, seen: dict[Expr, frozenset[Monomial]]) -> frozenset[Monomial]:
    """The term's value in the monomial model (see the module docstring)."""
    found = seen.get(e)
    if found is not None:
        return found
    h = e.head
    if h == Head.VAR:
        found = frozenset({((e.sexpr, 1),)})
    elif h == Head.SUM:
        found = monomials(e.args[0], seen)
    elif h in (Head.ADD, Head.CONCAT):
        found = monomials(e.args[0], seen) | monomials(e.args[1], seen)
    elif h in (Head.MUL, Head.DIV):
        right = monomials(e.args[1], seen)
        found = frozenset(_times(a, b) for a in monomials(e.args[0], seen) for b in right)
    else:  # a unary head or rms: one atom named by the head
        atom: Monomial = ((h, 1),)
        found = frozenset(_times(a, atom) for a in monomials(e.args[-1], seen))
    seen[e] = found
    return found


def _divides(a: Monomial, b: Monomial) -> bool:
    powers = dict(b)
    return all(powers.get(atom, 0) >= n for atom, n in a)


def monomial_sub(a: frozenset[Monomial], b: frozenset[Monomial]) -> bool:
    return all(any(_divides(m, n) for n in b) for m in a)


class Refuter:
    """Both models against one reference's output terms; `refutes(c)` is true when some model
    shows `c` is a subexpression of no output."""

    def __init__(self, finals: Sequence[Expr]) -> None:
        self._heads: dict[Expr, frozenset[str]] = {}
        self._monos: dict[Expr, frozenset[Monomial]] = {}
        self._final_heads = [head_set(f, self._heads) for f in finals]
        self._final_monos = [monomials(f, self._monos) for f in finals]

    def refuted_by_heads(self, c: Expr) -> bool:
        heads = head_set(c, self._heads)
        return not any(heads <= f for f in self._final_heads)

    def refuted_by_monomials(self, c: Expr) -> bool:
        monos = monomials(c, self._monos)
        return not any(monomial_sub(monos, f) for f in self._final_monos)

    def refutes(self, c: Expr) -> bool:
        return self.refuted_by_heads(c) or self.refuted_by_monomials(c)
