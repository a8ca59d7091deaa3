"""Subexpression verdicts from normal forms (normal_form.py): exact, with no solver.

The axioms are Horn clauses, so they entail `sub(c, f)` exactly when it holds in their least
model: terms modulo the equations, with `a ⊑ b` when a's class is the class of a subterm of some
term of b's class (each `⊑` axiom puts an argument under its application; the partial-sum lemma
follows from them, since sum(i, x) and x are subexpressions of each other). That model keeps
the inputs distinct and apart, as the axioms ask, so the verdicts below are Z3's verdicts where
Z3 reaches one, and answers where it stops at its resource limit.

On normal forms: the classes under a value C, without entering atoms or divisors, are the A with
A·k ⊆ C (as multisets) for one generalised monomial k: a degree shift, any numerator atoms (none
included) and divisors, in order where A's monomial has a single atom. (Taking a sub-multiset is
splitting an add; a factor of a product, a numerator of a division and a shift all multiply A by
such a k; conversely `red(s, div(..div(mul(A, n), z1).., zq))` has A·k as its value.) Below that:
the arguments of C's atoms and C's divisors, recursively. A k that works maps one chosen monomial
of A onto some monomial of C, which fixes k, so each value costs |C| tries of |A| lookups.

Verdicts are True, False, or None when a normal form passes the size budget: undecided, which
the oracle keeps and counts.

**Degrees only grow** (`grows`): every op adds to the degrees of what it builds on (a sum adds its
own, a product its factor's, a division or an atom keeps them, and nothing lowers one: a mean
accumulator is a sum here), so a tensor of a μGraph whose output has the output's normal form sits
inside it with a k of degree at least 0, at every level. The axioms also accept negative degrees
(`sum(-i, sum(i, x)) = x`, so x and sum(i, x) are subexpressions of each other, in Mirage as here),
which is why most queries Z3 left unknown are subexpressions: summing a weight over its output
dim, or an input over more rows than the output sums, is one. No μGraph can grow out of such a
tensor into the output, and the search prunes them (`Verdict.SHRINKS`, unless `grow_only` is
off). The argument holds where every reduction's size is a power of two, as in the benchmarks:
ceil(log2(n)) is then exact and adds up over nested sums; for other sizes the log-degrees are
Mirage's approximation and so is the rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from mugraph.stages.prune.expr import Expr
from mugraph.stages.prune.normal_form import Monomial, NormalForms, TooLarge, Value, one_atom, times

NORMAL_FORM_VERSION = "normal-form/1"  # part of every memo key its verdicts are stored under


def _minus(big: tuple[int, ...], small: tuple[int, ...]) -> tuple[int, ...] | None:
    """The sorted multiset big - small, or None where small is not inside big (both sorted)."""
    out: list[int] = []
    i = 0
    for x in big:
        if i < len(small) and small[i] == x:
            i += 1
        elif i < len(small) and small[i] < x:
            return None
        else:
            out.append(x)
    return tuple(out) if i == len(small) else None


def quotient(c: Monomial, m: Monomial) -> Monomial | None:
    """The generalised monomial k with m·k = c, if any (times' conventions)."""
    num = _minus(c[1], m[1])
    if num is None:
        return None
    if not num and one_atom(m):  # one atom on both sides: m's divisors begin c's, in order
        if c[2][: len(m[2])] != m[2]:
            return None
        return (c[0] - m[0], (), c[2][len(m[2]) :])
    dens = _minus(c[2], tuple(sorted(m[2])))
    if dens is None:
        return None
    return (c[0] - m[0], num, dens)


def scaled_into(a: Value, c: Value, grow: bool = False) -> bool:
    """Whether a·k ⊆ c (with multiplicity) for some generalised monomial k (with `grow`, of
    degree at least 0)."""
    counts = dict(c)
    # A pivot over one atom, where there is one, fixes the order of k's divisors for every
    # one-atom monomial of a; otherwise every monomial of a·k has two or more atoms and the
    # order does not matter. Of those, the rarest pivot leaves the fewest k to try.
    singles = [(m, n) for m, n in a if one_atom(m)]
    pivot, need = singles[0] if singles else a[0]
    for cm, have in c:
        if have < need:
            continue
        k = quotient(cm, pivot)
        if k is not None and (k[0] >= 0 or not grow) and all(counts.get(times(m, k), 0) >= n for m, n in a):
            return True
    return False


class Decider:
    """Verdicts against one reference's output terms."""

    def __init__(self, finals: Sequence[Expr]) -> None:
        self.forms = NormalForms()
        self._finals = [self.forms.of(f) for f in finals]
        self._below: list[int] | None = None
        self._under: dict[int, bool] = {}
        self._grows: dict[int, bool] = {}

    def below(self) -> list[int]:
        """Every value inside some output (the outputs included), each once."""
        if self._below is None:
            seen: dict[int, None] = {}
            for f in self._finals:
                seen.update(dict.fromkeys(self.forms.below(f)))
            self._below = list(seen)
        return self._below

    def decide(self, candidate: Expr) -> bool | None:
        """True: a subexpression of some output; False: provably of none; None: undecided."""
        try:
            a = self.forms.of(candidate)
        except TooLarge:
            return None
        found = self._under.get(a)
        if found is None:
            values = self.forms.values
            found = self._under[a] = any(scaled_into(values[a], values[c]) for c in self.below())
        return found

    def grows(self, candidate: Expr) -> bool:
        """Whether the candidate is under some output with k of degree at least 0 at every step:
        the degrees of its sums at most those they meet in the output (see the module's notes).
        Only meaningful where `decide` answered True."""
        a = self.forms.of(candidate)
        found = self._grows.get(a)
        if found is None:
            values = self.forms.values
            found = self._grows[a] = any(scaled_into(values[a], values[c], grow=True) for c in self.below())
        return found

    def sub(self, a: Expr, b: Expr) -> bool | None:
        """Whether a ⊑ b (None where a normal form is too large): for tests and explanations."""
        try:
            va, vb = self.forms.of(a), self.forms.of(b)
        except TooLarge:
            return None
        values = self.forms.values
        return any(scaled_into(values[va], values[c]) for c in self.forms.below(vb))
