"""Normal forms of abstract expressions modulo Mirage's equations (z3_encoding.py's A_eq).

Two terms are equal under the axioms exactly when their normal forms are equal, so the
subexpression question (decide.py) can be answered on normal forms without a solver.

**Values.** A value is a multiset of monomials (add is multiset union: sums float out of every
product, numerator and reduction, since mul distributes over add on both sides, div over add in
its numerator, and sums over add). A monomial is (degree, numerator, divisors):

- degree: the summed log-degrees of the reductions above it (`sum(i, sum(j, x)) = sum(i+j, x)`,
  and sums pass through mul and through div's numerator). Degrees range over all integers:
  `sum(-i, sum(i, x)) = x` is an instance of the axioms.
- numerator: a non-empty multiset of atoms (mul is associative and commutative).
- divisors: the values divided by, in order. `mul(x, div(y, z)) = div(mul(x, y), z)` moves every
  divisor out of a product, and with two or more numerator atoms any two neighbouring divisors
  can be swapped (`((a·b)/y)/z = (a/y)·(b/z) = ((a·b)/z)/y`), so there they form a multiset
  (kept sorted). Over one atom no equation reorders them: `(a/y)/z` and `(a/z)/y` differ.

**Atoms** are inputs and every other head (unary ops, rms, concat, and any head added later),
keyed by head, parameters and the normal forms of their arguments: no equation looks inside
them, so a new op needs no code here. rms's first parameter is its degree and is kept as Z3
sees it, ceil(log2(n)).

Monomials and values are plain tuples of ints, interned to ids, so comparing and hashing them is
cheap. A value that grows past `MAX_MONOMIALS` distinct monomials (a product of many sums) raises
`TooLarge`: the caller answers "undecided" rather than spend unbounded time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from mugraph.stages.prune.expr import Expr, Head
from mugraph.stages.prune.z3_encoding import log_degree

MAX_MONOMIALS = 4096

Monomial = tuple[int, tuple[int, ...], tuple[int, ...]]  # (degree, numerator atoms, divisor value ids)
Value = tuple[tuple[Monomial, int], ...]  # sorted (monomial, count) pairs


class TooLarge(Exception):
    """A normal form past the size budget."""


@dataclass(frozen=True, slots=True)
class Atom:
    """An opaque function of its arguments' values (`args` are value ids)."""

    head: str
    params: tuple[int, ...]
    args: tuple[int, ...]


def _params(e: Expr) -> tuple[int, ...]:
    if e.head == Head.RMS:  # Z3 sees rms's degree as ceil(log2(n)), as for sums
        return (log_degree(e.param[0]), *e.param[1:])
    return e.param


def one_atom(m: Monomial) -> bool:
    return len(m[1]) == 1


def times(m: Monomial, k: Monomial) -> Monomial:
    """m·k, where k may have no numerator atoms (then it only shifts and divides). Over one atom
    k's divisors follow m's in order; otherwise the divisors are a sorted multiset."""
    num = m[1] + k[1]
    if len(num) == 1:
        return (m[0] + k[0], num, m[2] + k[2])
    return (m[0] + k[0], tuple(sorted(num)), tuple(sorted(m[2] + k[2])))


class NormalForms:
    """Normal forms of terms, with the atoms and values they name interned to ids."""

    def __init__(self) -> None:
        self._of: dict[Expr, int] = {}
        self._value_ids: dict[Value, int] = {}
        self.values: list[Value] = []
        self._atom_ids: dict[Atom, int] = {}
        self.atoms: list[Atom] = []

    def __len__(self) -> int:
        return len(self._of)

    def value_id(self, v: Value) -> int:
        found = self._value_ids.get(v)
        if found is None:
            found = self._value_ids[v] = len(self.values)
            self.values.append(v)
        return found

    def atom_id(self, a: Atom) -> int:
        found = self._atom_ids.get(a)
        if found is None:
            found = self._atom_ids[a] = len(self.atoms)
            self.atoms.append(a)
        return found

    def of(self, e: Expr) -> int:
        """The id of e's normal form (raises TooLarge past the budget)."""
        found = self._of.get(e)
        if found is None:
            found = self._of[e] = self.value_id(self._build(e))
        return found

    def value(self, e: Expr) -> Value:
        return self.values[self.of(e)]

    def _build(self, e: Expr) -> Value:
        h = e.head
        if h == Head.ADD:
            return _collect([*self.value(e.args[0]), *self.value(e.args[1])])
        if h == Head.MUL:
            right = self.value(e.args[1])
            return _collect((times(m, n), c * d) for m, c in self.value(e.args[0]) for n, d in right)
        if h == Head.DIV:
            k: Monomial = (0, (), (self.of(e.args[1]),))
            return _collect((times(m, k), c) for m, c in self.value(e.args[0]))
        if h == Head.SUM:
            s = log_degree(e.param[0])
            return tuple(((m[0] + s, m[1], m[2]), c) for m, c in self.value(e.args[0]))
        atom = self.atom_id(Atom(h, _params(e), tuple(self.of(a) for a in e.args)))
        return (((0, (atom,), ()), 1),)

    def inner(self, v: int) -> Iterator[int]:
        """The value ids directly inside value v: its atoms' arguments and its divisors."""
        seen: set[int] = set()
        for m, _ in self.values[v]:
            for a in m[1]:
                for x in self.atoms[a].args:
                    if x not in seen:
                        seen.add(x)
                        yield x
            for x in m[2]:
                if x not in seen:
                    seen.add(x)
                    yield x

    def below(self, v: int) -> list[int]:
        """v and every value inside it, at any depth (each once, v first)."""
        out, seen = [v], {v}
        i = 0
        while i < len(out):
            for x in self.inner(out[i]):
                if x not in seen:
                    seen.add(x)
                    out.append(x)
            i += 1
        return out

    def text(self, v: int) -> str:
        """A readable rendering of value v, for messages and tests."""
        return " + ".join(
            self._monomial_text(m) if c == 1 else f"{c}·{self._monomial_text(m)}" for m, c in self.values[v]
        )

    def _monomial_text(self, m: Monomial) -> str:
        out = "·".join(self._atom_text(a) for a in m[1])
        out += "".join(f"/[{self.text(d)}]" for d in m[2])
        return f"Σ{m[0]}({out})" if m[0] else out

    def _atom_text(self, a: int) -> str:
        atom = self.atoms[a]
        if atom.head == Head.VAR:
            return f"v{atom.params[0]}"
        inside = [str(p) for p in atom.params] + [self.text(x) for x in atom.args]
        return f"{atom.head}({', '.join(inside)})"


def _collect(items: Sequence[tuple[Monomial, int]] | Iterator[tuple[Monomial, int]]) -> Value:
    counts: dict[Monomial, int] = {}
    for m, c in items:
        counts[m] = counts.get(m, 0) + c
    if len(counts) > MAX_MONOMIALS:
        raise TooLarge(f"a normal form of more than {MAX_MONOMIALS} monomials")
    return tuple(sorted(counts.items()))
