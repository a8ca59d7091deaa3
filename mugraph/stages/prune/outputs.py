"""Whether a complete candidate's outputs can be the reference's, from their normal forms.

A candidate reaches the fingerprints when it leaves as many tensors unconsumed as the reference
has outputs, of the same shapes; over a lora search's first 40 s 98% of those fail, and a
fingerprint runs the candidate on every seed (13% of those 40 s; candidates crowd the start of a
space, and over lora's whole space fingerprints take 1.3% of the time). Each of their output
terms was kept as a subexpression of some reference output (`decide.py`), but a μGraph equal to
the reference has outputs *equal* to its outputs under the axioms, and normal forms decide that
exactly: the candidate whose output terms, as a multiset, are not the reference's is not
fingerprinted. Every expert of the built-in programs and every saved μGraph of them in the test
data has the reference's normal forms (`tests/stages/prune/test_outputs.py`).

The rule holds where the terms keep what makes two values differ, which is not everywhere:

- a sum's degree is ceil(log2(n)), additive over nested sums only where the sizes are powers of
  two (a sum over 3 then over 5 has degree 5, one over 15 degree 4). A μGraph equal to the
  reference sums, per output element, the same products the reference does, in parts whose sizes
  multiply to the reference's; where each of the reference's sums (and rms and layer-norm sizes)
  is a power of two, so is every part, and the degrees agree;
- `mul_scalar`'s term is its operand's (scalars are not in the terms), so `2·x` and `x + x`
  differ there and not in value; a search whose ops include it fingerprints every candidate.

Elsewhere, or where a normal form passes its size budget, the candidate is fingerprinted, as
before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mugraph.ir.types import OpKind
from mugraph.stages.prune.expr import Expr, Head
from mugraph.stages.prune.normal_form import NormalForms, TooLarge

__all__ = ["OutputForms", "terms_exact"]

MAX_FORMS = 1 << 18  # terms whose normal forms are kept before the table starts afresh


def terms_exact(finals: Sequence[Expr], kinds: Iterable[OpKind]) -> bool:
    """Whether equal values mean equal normal forms for a search for the outputs `finals` that may
    use these op kinds (see the module's notes)."""
    if OpKind.MUL_SCALAR in set(kinds):
        return False
    seen: set[Expr] = set()
    todo = list(finals)
    while todo:
        e = todo.pop()
        if e in seen:
            continue
        seen.add(e)
        if e.head in _SIZED and not _power_of_two(e.param[0]):
            return False
        todo.extend(e.args)
    return True


_SIZED = frozenset({Head.SUM, Head.RMS, Head.LAYER_NORM})  # heads whose first parameter is a size


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class OutputForms:
    """The reference's output terms as normal forms, and the test a candidate's outputs must pass
    before they are fingerprinted."""

    def __init__(self, finals: Sequence[Expr], exact: bool) -> None:
        self.finals = tuple(finals)
        self.exact = exact
        self._forms = NormalForms()
        self._want = self._sorted_forms(self.finals) if exact else None

    def _sorted_forms(self, terms: Sequence[Expr]) -> list[int] | None:
        try:
            return sorted(self._forms.of(t) for t in terms)
        except TooLarge:
            return None

    def differ(self, outputs: Sequence[Expr]) -> bool:
        """True only where `outputs` (in any order) provably are not the reference's outputs: their
        normal forms differ, and the rule holds for this search."""
        if self._want is None:
            return False
        if len(self._forms) > MAX_FORMS:  # start afresh, the reference's forms first
            self._forms = NormalForms()
            self._want = self._sorted_forms(self.finals)
        got = self._sorted_forms(outputs)
        return got is not None and got != self._want
