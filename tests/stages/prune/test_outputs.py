"""A candidate whose output terms are not the reference's (normal forms) is not fingerprinted.

The rule is only as good as its premise: a μGraph equal to its reference has the reference's
normal forms. Checked on every expert of the built-in programs, on the μGraphs kept as test data
(found by searches and timed on a GPU), and on whole narrowed searches, which find the same μGraphs
with the rule as without it while fingerprinting fewer candidates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mugraph.ir.serialize import loads
from mugraph.ir.types import OpKind
from mugraph.stages.prune import expr as E
from mugraph.stages.prune.expr import output_exprs
from mugraph.stages.prune.outputs import OutputForms, terms_exact
from mugraph.stages.search.explore import Searcher
from tests.helpers.builtin import EXPERTS, PROGRAMS, reference
from tests.helpers.search import fragment

ROOT = Path(__file__).resolve().parents[2]
SAVED = [
    (ROOT / "stages/layout/data/mugraphs.jsonl", "fragment"),
    (ROOT.parent / "benchmarks/data/gpu_kernels_h100_graphs.jsonl", "program"),
]


def _forms(name: str) -> OutputForms:
    ref = reference(name)
    finals = output_exprs(ref)
    return OutputForms(finals, terms_exact(finals, {op.kind for op in ref.ops}))


@pytest.mark.parametrize(("name", "label"), EXPERTS)
def test_every_expert_has_its_references_normal_forms(name: str, label: str) -> None:
    forms = _forms(name)
    assert forms.exact, f"{name}: the rule is off for a built-in program"
    assert not forms.differ(output_exprs(PROGRAMS[name].experts[label]()))


def test_every_saved_mugraph_has_its_references_normal_forms() -> None:
    checked = 0
    for path, key in SAVED:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec[key] not in PROGRAMS:
                continue
            assert not _forms(rec[key]).differ(output_exprs(loads(rec["graph"]))), (path.name, rec["digest"])
            checked += 1
    assert checked >= 40


def test_outputs_in_another_order_pass_and_wrong_ones_do_not() -> None:
    x, w, a, b = (E.var(i) for i in range(4))
    finals = [E.add(E.matmul(x, w, 64), E.matmul(E.matmul(x, a, 64), b, 16)), E.matmul(x, w, 64)]
    forms = OutputForms(finals, exact=True)
    assert not forms.differ(list(reversed(finals)))
    assert forms.differ([finals[0], E.matmul(x, a, 64)])  # a subexpression, not the output
    assert forms.differ([finals[0], E.matmul(x, w, 128)])  # summed over twice as many
    # tiled: a sum over 16 of partial products over 4 is the same sum over 64
    tiled = E.red(16, E.matmul(x, w, 4))
    assert not forms.differ([finals[0], tiled])
    assert not OutputForms(finals, exact=False).differ([finals[0], E.matmul(x, a, 64)])


def test_the_rule_is_off_where_terms_lose_what_values_keep() -> None:
    x, w = E.var(0), E.var(1)
    assert terms_exact([E.matmul(x, w, 4096)], {OpKind.MATMUL})
    assert not terms_exact([E.matmul(x, w, 4096)], {OpKind.MATMUL, OpKind.MUL_SCALAR})  # scalars are dropped
    assert not terms_exact([E.matmul(x, w, 6144)], {OpKind.MATMUL})  # ceil(log2) is not additive
    assert not terms_exact([E.div(x, E.rms(48, x))], {OpKind.RMS_NORM})
    assert terms_exact([E.div(x, E.rms(64, x))], {OpKind.RMS_NORM})


@pytest.mark.parametrize("name", ["rms_norm", "gated_mlp", "lora"])
def test_a_search_finds_the_same_mugraphs_fingerprinting_fewer(name: str) -> None:
    with_rule = Searcher(fragment(name))
    without = Searcher(fragment(name))
    without.outputs = OutputForms(without.fragment.finals, exact=False)
    assert with_rule.outputs.exact
    a, b = with_rule.explore(()), without.explore(())
    assert not a.frontier and not b.frontier
    assert set(a.found) == set(b.found) and a.found
    assert a.counters.nodes == b.counters.nodes
    assert a.counters.fingerprints < b.counters.fingerprints
