"""The normal-form verdicts agree with Z3 wherever Z3 decides, and with the finite models'
refutations; the oracle's engines and their counters.

`data/z3_sample.json` holds queries sampled from the benchmark spaces' searches with the verdict
Z3 gave each at Mirage's rlimit (benchmarks/z3_sample.py records it: about 30 ms a query). The fast
test compares the normal forms with every recorded verdict and asks Z3 again on a few; the slow
one asks Z3 again on the whole sample, so a change of Z3 or of the axioms is caught too.
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from mugraph.stages.prune.decide import Decider
from mugraph.stages.prune.expr import Expr, output_exprs, parse
from mugraph.stages.prune.models import Refuter
from mugraph.stages.prune.oracle import OracleConfig, SubexprOracle, Verdict
from mugraph.stages.prune.z3_encoding import SubQueries
from tests.helpers.builtin import reference
from tests.helpers.verdict_tables import GATED_MLP, LORA

SAMPLE: dict[str, Any] = json.loads((Path(__file__).parent / "data/z3_sample.json").read_text())
FROM_Z3 = {"unsat": "Y", "sat": "N", "unknown": "U"}


@cache
def decider(name: str) -> Decider:
    return Decider([parse(f) for f in SAMPLE[name]["finals"]])


def mine(name: str, text: str) -> str:
    found = decider(name).decide(parse(text))
    return "U" if found is None else "Y" if found else "N"


@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_the_normal_forms_agree_with_every_verdict_z3_reached(name: str) -> None:
    rows = SAMPLE[name]["queries"]
    assert len(rows) >= 300 and {v for _, v in rows} >= {"Y", "U"}
    wrong = [(q, z3, mine(name, q)) for q, z3 in rows if z3 != "U" and mine(name, q) != z3]
    assert wrong == []
    assert all(mine(name, q) != "U" for q, _ in rows)  # the sample's unknowns are all decided here
    # The search's "degrees only grow" rule never prunes what Z3 proves.
    assert all(decider(name).grows(parse(q)) for q, z3 in rows if z3 == "Y")


@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_z3_still_gives_the_recorded_verdicts_on_a_few(name: str) -> None:
    data = SAMPLE[name]
    rows = random.Random(0).sample(data["queries"], 8)
    z3 = SubQueries([parse(f) for f in data["finals"]], data["n_inputs"], data["rlimit"], True)
    assert [FROM_Z3[z3.check(parse(q))] for q, _ in rows] == [v for _, v in rows]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_z3_agrees_on_the_whole_sample(name: str) -> None:
    data = SAMPLE[name]
    z3 = SubQueries([parse(f) for f in data["finals"]], data["n_inputs"], data["rlimit"], True)
    wrong = []
    for q, _ in data["queries"]:
        v = FROM_Z3[z3.check(parse(q))]
        if v != "U" and v != mine(name, q):
            wrong.append((q, v))
    assert wrong == []


@pytest.mark.parametrize("name", ["gated_mlp", "lora"])
def test_the_verdict_tables(name: str) -> None:
    """Every candidate the table keeps (Z3 proves it) is a subexpression; every one the models
    refute is not."""
    table = {"gated_mlp": GATED_MLP, "lora": LORA}[name]
    finals = output_exprs(reference(name))
    d, refuter = Decider(finals), Refuter(finals)
    assert all(d.decide(e) for _, e, keep in table if keep)
    assert not any(d.decide(e) for _, e, _ in table if refuter.refutes(e))


def _oracle(name: str, engine: str) -> SubexprOracle:
    ref = reference(name)
    return SubexprOracle(output_exprs(ref), len(ref.input_tensors), OracleConfig(engine=engine))  # type: ignore[arg-type]


def _exprs() -> list[Expr]:
    return [parse(q) for q, _ in SAMPLE["gated_mlp"]["queries"][:40]] + [e for _, e, _ in GATED_MLP]


def test_both_checks_z3_against_the_normal_forms() -> None:
    exprs = _exprs()
    both, nf = _oracle("gated_mlp", "both"), _oracle("gated_mlp", "normal_form")
    assert both.verdicts(exprs) == nf.verdicts(exprs)
    assert Verdict.UNKNOWN not in nf.verdicts(exprs)
    assert both.counters.disagreements == 0 and both.disagreed == []
    assert both.counters.decided == len(set(exprs)) and both.counters.solver_calls > 0
    assert nf.counters.solver_calls == nf.counters.decided == len(set(exprs)) and nf.counters.prefiltered == 0


def test_an_undecided_normal_form_is_kept_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mugraph.stages.prune.normal_form.MAX_MONOMIALS", 2)
    o = _oracle("gated_mlp", "normal_form")
    wide = parse("(* (+ v0 v1) (+ v1 v2))")  # four monomials
    assert o.verdicts([wide]) == [Verdict.UNKNOWN] and o.keep_many([wide]) == [True]
    assert o.counters.undecided == 1 and o.counters.unknowns == 1


def test_memo_keys_name_the_engine() -> None:
    e = LORA[0][1]
    keys = {engine: _oracle("lora", engine).key(e) for engine in ("normal_form", "z3", "both")}
    assert keys["normal_form"] != keys["z3"] == keys["both"]
    limited = SubexprOracle(output_exprs(reference("lora")), 4, OracleConfig(rlimit=1000))
    assert limited.key(e) == keys["normal_form"]  # no solver limit bears on a normal form
