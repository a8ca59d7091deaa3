"""Mutants of every expert — a wrong imap, fmap, accumulator or omap, swapped matmul operands —
are rejected: either the IR refuses them, or the fingerprints differ.

float64 is the independent oracle: a valid mutant that float64 finds wrong must fail the
fingerprints, and one that float64 finds equal (some accumulator swaps are) must pass them,
so the fingerprints have neither false positives nor false negatives on these graphs.
"""

from __future__ import annotations

import numpy as np
import pytest

from mugraph.ir.errors import MugraphError
from mugraph.ir.serialize import from_json
from mugraph.stages.verify.check import float_max_rel_err
from tests.helpers.builtin import EXPERTS, PROGRAMS, reference, reference_fingerprints
from tests.helpers.mutants import mutants

KINDS = ["imap", "fmap", "matmul_swap", "accumulator", "omap"]


@pytest.mark.parametrize(("name", "label"), EXPERTS)
def test_mutants_are_rejected(name: str, label: str) -> None:
    expert = PROGRAMS[name].experts[label]()
    fp = reference_fingerprints(name, (0,))
    seen = {k: 0 for k in KINDS}
    wrong = {k: 0 for k in KINDS}
    for kind, what, data in mutants(expert):
        seen[kind] += 1
        try:
            mutant = from_json(data)
        except MugraphError:
            continue  # refused by the IR: rejected
        perm = fp.match(mutant)
        if (
            perm is None
            and len(mutant.output_tensors) == 1
            and mutant.output_tensors[0].shape != reference(name).output_tensors[0].shape
        ):
            wrong[kind] += 1
            continue  # a different output shape: nothing to compare in float64
        err = float_max_rel_err(reference(name), mutant, perm or (0,), np)
        if err > 1e-6:
            wrong[kind] += 1
            assert perm is None, f"{name}/{label}: fingerprints accept wrong {what} (err {err:.3g})"
        else:
            assert perm is not None, f"{name}/{label}: fingerprints reject the equal mutant {what}"
    assert seen["imap"] and seen["omap"] and seen["accumulator"], seen
    assert wrong["imap"] + wrong["fmap"] + wrong["accumulator"] + wrong["omap"] > 0, wrong


def test_every_kind_of_mutant_reaches_the_fingerprints() -> None:
    """Across the benchmarks, each mutation kind yields valid-but-wrong graphs the fingerprints
    must catch (so the test above is not passing on IR refusals alone)."""
    totals = {k: 0 for k in KINDS}
    for name in ("gqa", "lora"):
        fp = reference_fingerprints(name, (0,))
        for label in PROGRAMS[name].experts:
            for kind, _, data in mutants(PROGRAMS[name].experts[label]()):
                try:
                    mutant = from_json(data)
                except MugraphError:
                    continue
                totals[kind] += fp.match(mutant) is None
    assert all(totals[k] > 0 for k in KINDS), totals
