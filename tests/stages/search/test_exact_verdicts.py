"""The search under the normal-form oracle: it finds every μGraph Z3's oracle finds (and lora's
concat expert, which Z3 leaves unknown), checks out against Z3 in a whole narrowed space, and
counts undecided verdicts by what the policy did with them.

`data/normal_form_results.json` records, per narrowed space of the default suite and for the whole
default spaces of rms_norm and gated_mlp (slow), the states the default oracle explores; the
μGraphs are those `narrow_results.json` and `*_default.json` record for Z3's oracle.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mugraph.ir.canonical import canonical_digest
from mugraph.programs import get_builtin
from mugraph.stages.prune.oracle import Verdict
from mugraph.stages.search.config import SearchConfig, preset_config
from mugraph.stages.search.expand import find_instance
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.serial import run_search
from mugraph.stages.search.structure_labels import structure_labels
from mugraph.stages.verify.check import check_equivalence
from tests.helpers.builtin import reference
from tests.helpers.cli_json import run, summary

DATA = Path(__file__).parent / "data"
NARROW = json.loads((DATA / "narrow_results.json").read_text())
STATES = json.loads((DATA / "normal_form_results.json").read_text())

LORA_CONCAT = {"grids": [[128, 1, 1]], "fmaps": [-1, 0, 1], "kernel_ops": [], "franges": [2]}
LORA_CONCAT_PATH = [
    "open(grid=[128, 1, 1],imaps=[[-1, -1, -1], [1, -1, -1], [-1, -1, -1], [1, -1, -1]])",
    "loop(fmaps=[1, 0, 0, -1],F=2)",
]


def searcher(name: str, overrides: dict[str, object]) -> Searcher:
    config = preset_config(get_builtin(name).preset).with_overrides(overrides)
    return Searcher(Fragment(reference(name), config, name))


@pytest.mark.parametrize("name", sorted(NARROW))
def test_the_normal_forms_find_what_z3_found(name: str) -> None:
    s = searcher(name, NARROW[name]["overrides"])
    assert s.fragment.config.oracle == "normal_form"
    report = run_search(s)
    assert report.complete and report.counters.nodes == STATES[name]["states"]
    assert set(NARROW[name]["digests"]) <= set(report.found)
    assert report.counters.undecided_kept == report.counters.undecided_pruned == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rms_norm", "gated_mlp"])
def test_whole_default_space_finds_z3_s_mugraphs(name: str) -> None:
    """About 20 and 40 s on a quiet core; Z3's oracle took twice as long on the same trees."""
    recorded = json.loads((DATA / f"{name}_default.json").read_text())
    s = searcher(name, recorded["overrides"])
    report = run_search(s)
    assert report.complete and report.counters.nodes == STATES["whole_default"][name]["states"]
    assert sorted(report.found) == recorded["digests"]


def test_both_engines_agree_on_a_whole_narrowed_space() -> None:
    """Every query of lora's narrowed space, asked of Z3 (with the finite models) and of the
    normal forms: no decided verdict differs."""
    s = searcher("lora", {**NARROW["lora"]["overrides"], "oracle": "both"})
    report = run_search(s)
    c = s.oracle.counters
    assert c.disagreements == 0 and c.prefiltered > 0 and c.solver_calls > 0 and c.unknowns > 0
    assert set(NARROW["lora"]["digests"]) <= set(report.found)


def test_undecided_verdicts_are_counted_by_outcome() -> None:
    s = searcher("rms_norm", {**NARROW["rms_norm"]["overrides"], "oracle": "z3"})
    r = s.explore(())
    assert r.counters.undecided_pruned == s.oracle.counters.verdicts["U"] > 0 and r.counters.undecided_kept == 0
    kept = searcher("rms_norm", {**NARROW["rms_norm"]["overrides"], "oracle": "z3", "unknown_keeps": True})
    r = kept.explore(())
    assert r.counters.undecided_kept == kept.oracle.counters.verdicts["U"] > 0 and r.counters.undecided_pruned == 0


def test_search_json_counts_undecided_verdicts(tmp_path: Path) -> None:
    narrow = [f"--set={k}={json.dumps(v)}" for k, v in NARROW["rms_norm"]["overrides"].items()]
    args = ["search", "rms_norm", *narrow, "--memo-url", "local", "--json"]
    z3 = summary(run(*args, "--set", "oracle=z3", cwd=tmp_path))
    assert z3["counters"]["undecided_pruned"] > 0 and z3["counters"]["undecided_kept"] == 0
    nf = summary(run(*args, cwd=tmp_path))
    assert nf["counters"]["undecided_pruned"] == nf["counters"]["undecided_kept"] == 0
    assert set(z3["digests"]) <= set(nf["digests"]) and nf["config_digest"] != z3["config_digest"]


def test_lora_concat_expert_is_kept_and_found() -> None:
    """Its concat-matmul adds two half-depth partial products: Z3 leaves it unknown at the rlimit
    (test_explore.py), the normal forms decide it."""
    s = searcher("lora", LORA_CONCAT)
    state = find_instance(
        s.fragment.root, s.fragment.config, [*LORA_CONCAT_PATH, "matmul(0,2)", "concat_matmul(0,4,1,3)"]
    )
    (term,) = state.new
    assert s.oracle.verdicts([term]) == [Verdict.YES]
    want = canonical_digest(get_builtin("lora").experts["concat"]())
    report = run_search(
        s, budget=2000, start=[s.find_path(structure_labels(LORA_CONCAT_PATH))], stop=lambda r: want in r.found
    )
    assert want in report.found
    assert check_equivalence(reference("lora"), report.found[want].kernel_graph(), seeds=(3,)).equivalent


def test_a_sum_no_op_can_build_on_is_pruned_unless_asked() -> None:
    """Summing W over its output dim (6144) is a subexpression of rms_norm's output under the
    axioms (through a negative degree) but nothing grows from it into the output."""
    from mugraph.stages.prune.expr import parse

    term = parse("(sum 6144 v1)")
    s = searcher("rms_norm", NARROW["rms_norm"]["overrides"])
    assert s.oracle.verdicts([term]) == [Verdict.SHRINKS] and s.oracle.keep_many([term]) == [False]
    lenient = searcher("rms_norm", {**NARROW["rms_norm"]["overrides"], "grow_only": False})
    assert lenient.oracle.keep_many([term]) == [True]


def test_z3_keeps_the_digests_of_the_spaces_it_searched() -> None:
    z3 = SearchConfig(oracle="z3")
    assert z3.digest != SearchConfig().digest
    assert z3.digest == z3.with_overrides({"grow_only": False}).digest  # the normal forms' rule only
    assert SearchConfig().digest != SearchConfig(grow_only=False).digest
