"""The search finds the experts, returns only equivalent μGraphs, and is deterministic and
partitionable: budgeted tasks plus their frontiers cover exactly the unbudgeted tree."""

from __future__ import annotations

import pytest

from mugraph.ir.canonical import canonical_digest
from mugraph.programs import get_builtin
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.expand import find_instance
from mugraph.stages.search.explore import Fragment, Searcher, SearchPathError
from mugraph.stages.search.serial import run_search
from mugraph.stages.search.state import State
from mugraph.stages.search.structure_labels import structure_labels
from mugraph.stages.verify.check import check_equivalence
from tests.helpers.builtin import reference
from tests.helpers.search import FAST, fragment, full, searcher


def expert_digest(name: str) -> str:
    return canonical_digest(next(iter(get_builtin(name).experts.values()))())


@pytest.mark.parametrize("name", FAST)
def test_finds_the_expert(name: str) -> None:
    r = full(name)
    assert not r.frontier
    assert expert_digest(name) in r.found
    assert r.counters.ir_rejects == 0


@pytest.mark.parametrize("name", FAST)
def test_every_mugraph_found_is_equivalent_in_float64(name: str) -> None:
    for d, f in full(name).found.items():
        g = f.kernel_graph()
        assert canonical_digest(g) == d
        result = check_equivalence(reference(name), g, seeds=(5, 6))
        assert result.equivalent, (d, result.reason)
        assert result.float_max_rel_err is not None and result.float_max_rel_err < 1e-9


@pytest.mark.parametrize("name", FAST)
def test_paths_replay_to_the_same_mugraph(name: str) -> None:
    s = searcher(name)
    for d, f in full(name).found.items():
        state = s.replay(f.path)
        assert isinstance(state, State) and state.block is None
        again = s.explore(f.path, budget=1)  # a verified node is a leaf: found again, no frontier
        assert list(again.found) == [d] and again.frontier == []


def test_an_unreachable_expert_is_not_found() -> None:
    """rms_norm's expert needs 6 block ops; with 5 it cannot be built, and is not reported."""
    r = Searcher(fragment("rms_norm", max_block_ops=5)).explore(())
    assert expert_digest("rms_norm") not in r.found
    assert r.counters.nodes < full("rms_norm").counters.nodes


@pytest.mark.parametrize("budget", [1, 7, 60])
def test_budgeted_tasks_cover_the_tree_exactly(budget: int) -> None:
    s = searcher("rms_norm")
    whole = full("rms_norm")
    report = run_search(s, budget=budget)
    assert report.complete
    assert report.counters.nodes == whole.counters.nodes
    assert report.counters.children == whole.counters.children
    assert report.counters.fingerprints == whole.counters.fingerprints
    assert {d: f.path for d, f in report.found.items()} == {d: f.path for d, f in whole.found.items()}
    assert report.tasks >= whole.counters.kernel_nodes // budget  # a kernel node is one state


def test_tasks_split_the_lora_tree_exactly() -> None:
    s = searcher("lora")
    whole = full("lora")
    report = run_search(s, budget=400)
    assert report.tasks > 1 and report.counters.nodes == whole.counters.nodes
    assert set(report.found) == set(whole.found)


def test_two_runs_are_identical() -> None:
    """Fresh searchers (own oracle, no memo): same paths, results and counters."""
    a = Searcher(fragment("rms_norm")).explore((), budget=150)
    b = Searcher(fragment("rms_norm")).explore((), budget=150)
    assert a.frontier == b.frontier
    assert {d: (f.path, f.graph) for d, f in a.found.items()} == {d: (f.path, f.graph) for d, f in b.found.items()}
    ca, cb = a.counters.as_dict(), b.counters.as_dict()
    for key in ("seconds", "solver_seconds", "fingerprint_seconds"):
        ca.pop(key), cb.pop(key)
    assert ca == cb


def test_bad_paths_are_refused() -> None:
    s = searcher("rms_norm")
    with pytest.raises(SearchPathError, match="step 0"):
        s.replay((10**6,))
    with pytest.raises(SearchPathError):
        s.replay((0, -1))


GQA_K1 = [
    "open(grid=[2, 16, 4],imaps=[[0, -1, 1], [0, 2, -1], [0, 1, -1]])",
    "loop(fmaps=[-1, 2, 1],F=4)",
]
GQA_K1_BODY = ["matmul(0,1)", "exp(3)", "accum_sum(4)", "matmul(4,2)", "accum_no_red(6)", "close(omap=[0, 2, 1])"]


def test_gqa_second_kernel_is_found_below_the_experts_first() -> None:
    """The whole K2 search (grids, maps, ops, omaps) below the expert's K1: the expert is found,
    and so is Mirage's other saved K2 form (for-loop range 4, fmap 2 on both inputs)."""
    s = Searcher(fragment("gqa"))
    start = s.find_path(structure_labels(GQA_K1 + GQA_K1_BODY))
    r = s.explore(start)
    assert not r.frontier and expert_digest("gqa") in r.found and len(r.found) >= 2
    closes = [
        label for f in r.found.values() for label in s.describe(f.path)[len(start) :] if label.startswith("close(")
    ]
    assert any("fmaps=[-1, -1],F=1," in c for c in closes) and any("fmaps=[2, 2],F=4," in c for c in closes)
    for f in r.found.values():
        assert check_equivalence(reference("gqa"), f.kernel_graph(), seeds=(3,)).equivalent


@pytest.mark.slow
def test_gqa_expert_found_below_its_first_kernels_configuration() -> None:
    """Below K1's grid, imaps, fmaps and for-loop range (K1's body and all of K2), depth first
    until the expert turns up; every μGraph met on the way is equivalent."""
    s = Searcher(fragment("gqa"))
    want = expert_digest("gqa")
    report = run_search(s, budget=2000, start=[s.find_path(structure_labels(GQA_K1))], stop=lambda r: want in r.found)
    assert want in report.found and not report.complete
    for f in report.found.values():
        assert check_equivalence(reference("gqa"), f.kernel_graph(), seeds=(3,)).equivalent


def test_find_path_names_missing_choices() -> None:
    with pytest.raises(SearchPathError, match="no kept choice is labelled"):
        searcher("rms_norm").find_path(["open(grid=[3, 1, 1])"])


def paper_digest(name: str) -> str:
    return canonical_digest(get_builtin(name).experts["paper"]())


def test_widened_default_space_holds_the_papers_rms_norm_mugraph() -> None:
    """For-loop range 32 is a default range, and the search below grid 256 finds the paper's
    one-kernel RMSNorm+Linear (grid 256, for-loop range 32)."""
    assert 32 in preset_config("mlp").franges
    r = Searcher(fragment("rms_norm", grids=[[256, 1, 1]], franges=[32])).explore(())
    assert not r.frontier and paper_digest("rms_norm") in r.found


def test_widened_default_space_holds_the_papers_gqa_kernel() -> None:
    """(2, 8, 16) is among the default attention grids, and the whole K2 search below the paper's
    K1 (grid (2, 8, 16)), in the default space, finds the paper's μGraph: its second kernel's grid
    (2, 16, 1) is a default candidate for the inputs that K1 makes."""
    from mugraph.stages.search.candidates import grid_candidates

    shapes = [t.shape for t in reference("gqa").input_tensors]
    assert (2, 8, 16) in grid_candidates(shapes, preset_config("attention"))
    s = Searcher(Fragment(reference("gqa"), preset_config("attention"), "gqa"))  # not narrowed
    k1 = ["open(grid=[2, 8, 16],imaps=[[0, -1, 1], [0, 2, -1], [0, 1, -1]])", "loop(fmaps=[-1, 2, 1],F=4)"]
    r = s.explore(s.find_path(structure_labels(k1 + GQA_K1_BODY)))
    assert not r.frontier and paper_digest("gqa") in r.found


# lora's concat expert (Mirage's cpp_examples/lora.cc) uses for-loop range 2, which the lora preset
# holds; in a space narrowed to its own choices Z3's route prunes it as unknown (see below).
LORA_CONCAT = {"grids": [[128, 1, 1]], "fmaps": [-1, 0, 1], "kernel_ops": [], "franges": [2]}
LORA_CONCAT_PATH = [
    "open(grid=[128, 1, 1],imaps=[[-1, -1, -1], [1, -1, -1], [-1, -1, -1], [1, -1, -1]])",
    "loop(fmaps=[1, 0, 0, -1],F=2)",
]


def test_lora_concat_expert_is_pruned_as_unknown() -> None:
    """Its concat-matmul adds two half-depth partial products: entailed by the axioms (through
    sums of negative degree) but beyond Z3's rlimit, and Mirage's policy prunes unknowns."""
    from mugraph.stages.prune.oracle import Verdict

    s = Searcher(fragment("lora", **LORA_CONCAT, oracle="z3"))
    labels = [*LORA_CONCAT_PATH, "matmul(0,2)", "concat_matmul(0,4,1,3)"]
    state = find_instance(s.fragment.root, s.fragment.config, labels)  # pruned: in no task's tree
    (term,) = state.new
    assert term.sexpr == "(+ (sum 128 (* v0 v1)) (sum 16 (* (sum 128 (* v0 v2)) v3)))"
    assert s.oracle.verdicts([term]) == [Verdict.UNKNOWN] and s.oracle.keep_many([term]) == [False]


def test_lora_concat_expert_is_in_the_default_space_and_found() -> None:
    """The lora preset's for-loop ranges hold 2, and the normal forms keep every step of the expert."""
    s = Searcher(Fragment(reference("lora"), preset_config("lora"), "lora"))
    assert 2 in s.fragment.config.franges
    want = canonical_digest(get_builtin("lora").experts["concat"]())
    report = run_search(
        s, budget=2000, start=[s.find_path(structure_labels(LORA_CONCAT_PATH))], stop=lambda r: want in r.found
    )
    assert want in report.found


def test_lora_concat_expert_found_when_unknowns_are_kept() -> None:
    s = Searcher(fragment("lora", **LORA_CONCAT, unknown_keeps=True, oracle="z3"))
    want = canonical_digest(get_builtin("lora").experts["concat"]())
    report = run_search(
        s, budget=2000, start=[s.find_path(structure_labels(LORA_CONCAT_PATH))], stop=lambda r: want in r.found
    )
    assert want in report.found
    for f in report.found.values():
        assert check_equivalence(reference("lora"), f.kernel_graph(), seeds=(3,)).equivalent
