"""Why a candidate estimated faster than the reference is held back: `show`'s headline, the report's
and `optimize`'s line give the reason the ranking applied (a spill before the model's error)."""

from __future__ import annotations

from typing import Any

import pytest

from mugraph.dashboards.summary import headline
from mugraph.stages.layout.rank import MODEL_ERROR
from mugraph.stages.layout.residency import MAX_REGISTERS


def row(digest: str, seconds: float, *, reference: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "digest": digest,
        "reference": reference,
        "confident": reference,
        "estimated_seconds": seconds,
        "kernels": 1 if not reference else 4,
        "dram_bytes": 1000,
        "fits": True,
        "profile": "H100",
        "speedup": 13.7e-6 / seconds,
        **extra,
    }


REFERENCE = row("r" * 64, 13.7e-6, reference=True)


@pytest.mark.parametrize(
    ("extra", "says", "not_says"),
    [
        ({"emitted_spill_bytes": 4096}, "spill 4,096 bytes of registers", "measured error"),
        ({"emitted_registers": 240}, f"240 of the {MAX_REGISTERS} registers per thread", "measured error"),
        ({"fits": False}, "do not fit", "error"),
        ({"emitted_registers": 64}, f"within the model's measured error ({MODEL_ERROR:.0%})", "spill"),
    ],
)
def test_the_headline_gives_the_reason_the_candidate_was_held_back(
    extra: dict[str, Any], says: str, not_says: str
) -> None:
    """A 4.53x candidate held back for spilling registers was once said to be 'within the model's
    error (10%)', which it is not."""
    fast = row("f" * 64, 13.7e-6 / 4.53, **extra)
    head = headline([REFERENCE, fast])
    assert head is not None and head["best_is_reference"] and head["runner_up"] == fast["digest"]
    assert "4.53x" in head["line"] and says in head["line"] and not_says not in head["line"], head["line"]


def test_console_and_report_give_one_reason() -> None:
    """The command line's held-back reason is the report's (one rule set): a row that does not fit
    is said not to fit, not to be within the model's error."""
    from mugraph.dashboards.console import why_not_confident
    from mugraph.dashboards.summary import held_back_reason

    row = {"fits": False, "emitted_spill_bytes": 0, "emitted_registers": 10, "speedup": 3.0}
    assert why_not_confident(row) == held_back_reason(row) == "its tiles do not fit the GPU's memory"


def test_a_kept_reference_gives_the_held_back_candidate_s_estimate_and_reason() -> None:
    from mugraph.dashboards.console import kept_reason

    top = {"digest": "c" * 64, "speedup": 1.66, "fits": True, "emitted_spill_bytes": 53_760, "emitted_registers": 255}
    done = {"ranking": {"f0": [top]}, "reference": {"f0": {"digest": "r", "reference": True}}, "complete": True}
    done |= {"best_per_fragment": {"f0": "r"}, "not_confident": ["f0"]}
    assert kept_reason(done, "f0") == (
        f"the best candidate, {'c' * 16}, is estimated 1.66x, but its tiles spill 53,760 bytes of registers per "
        "program, which the model prices least surely"
    )


def test_a_stopped_search_without_a_mugraph_is_said_plainly() -> None:
    from mugraph.dashboards.console import kept_reason

    done = {"ranking": {"f0": []}, "reference": {"f0": {"digest": "r", "reference": True}}, "complete": False}
    done["best_per_fragment"] = {"f0": "r"}
    reason = kept_reason(done, "f0")
    assert reason == "the search stopped at its time limit before finding any μGraph equal to it"


def test_a_whole_space_without_a_mugraph_is_not_read_as_a_failed_search() -> None:
    """Not "found no μGraph equal to it", which reads as if even the reference was not reproduced."""
    from mugraph.dashboards.console import kept_reason

    done = {"ranking": {"f0": []}, "reference": {"f0": {"digest": "r", "reference": True}}, "complete": True}
    done["best_per_fragment"] = {"f0": "r"}
    said = kept_reason(done, "f0")
    assert said == "its whole search space holds no μGraph equal to it other than the reference itself"


def test_a_space_whose_only_find_is_the_reference_s_own_graph_says_so() -> None:
    """The search found the reference program itself (its digest ranked as a candidate at 1.00x): not
    "no μGraph found is estimated faster (the best, ..., 1.00x)"."""
    from mugraph.dashboards.console import kept_reason

    own = {"digest": "r", "speedup": 1.0, "fits": True}
    done = {"ranking": {"f0": [own]}, "reference": {"f0": {"digest": "r", "reference": True}}, "complete": True}
    done["best_per_fragment"] = {"f0": "r"}
    assert (
        kept_reason(done, "f0") == "its whole search space holds no μGraph equal to it other than the reference itself"
    )


def test_a_reference_no_mugraph_beats_names_the_fastest_one_found() -> None:
    """docs/commands.md: where the reference is kept, the headline names the fastest μGraph and its
    estimate, also where none beats it (a tie, or all slower)."""
    for seconds, ratio in ((13.7e-6, "1.00x"), (27.4e-6, "0.50x")):
        h = headline([REFERENCE, row("b" * 64, seconds)])
        assert h is not None and h["best_is_reference"]
        assert "(no μGraph beats it)" in h["line"]
        assert f"; the fastest μGraph, {'b' * 16}, is estimated " in h["line"] and f"({ratio})" in h["line"]


def test_the_references_own_graph_found_by_the_search_is_not_named_the_fastest_mugraph() -> None:
    """A fragment whose space holds only the reference's own graph: the headline names no "fastest
    μGraph" (it said "the fastest μGraph, c0d93119…, 1.00x", where the verdict said none was found),
    and `show`'s table says what that row is."""
    from mugraph.cli.show import _ranking_lines

    reference = {**REFERENCE, "flops": 10, "bound": "dram"}
    own = row(REFERENCE["digest"], REFERENCE["estimated_seconds"], flops=10, bound="dram")
    head = headline([reference, own])
    assert head is not None and head["best_is_reference"] and "fastest μGraph" not in head["line"], head
    rows: list[Any] = [reference, own]
    lines = _ranking_lines(rows, None, {})
    assert lines[2].endswith("(the reference's own graph, as the search found it)") and "own" not in lines[1]


def test_a_speedup_that_two_decimals_would_call_1_00x_gets_a_third() -> None:
    """ "estimated 1.00x, but within the model's measured error" read as a reason for nothing; a
    candidate 0.4% faster is said to be 1.004x."""
    from mugraph.dashboards.console import not_confident_line
    from mugraph.ir.together import speedup_text

    assert [speedup_text(x) for x in (1.0, 1.004, 0.996, 1.36, 1.006)] == [
        "1.00x",
        "1.004x",
        "0.996x",
        "1.36x",
        "1.01x",
    ]
    near = row("c" * 64, 13.7e-6 / 1.004)
    assert "is estimated 1.004x, within the model's measured error" in not_confident_line(near)
    said = headline([REFERENCE, near])
    assert said is not None and "is estimated 1.004x, within the model's measured error" in said["line"]


def test_a_kept_reference_names_the_best_mugraph_other_than_its_own_graph() -> None:
    """The reference's own graph, found by the search and ranked first at 1.00x, is not "the best"
    μGraph found: the reason names the fastest other one, as `show`'s headline does."""
    from mugraph.dashboards.console import kept_reason

    own = {"digest": "r" * 64, "speedup": 1.0, "fits": True}
    other = {"digest": "c" * 64, "speedup": 0.96, "fits": True}
    done = {"ranking": {"f0": [own, other]}, "reference": {"f0": {"digest": "r" * 64, "reference": True}}}
    done |= {"complete": True, "best_per_fragment": {"f0": "r" * 64}}
    assert kept_reason(done, "f0") == f"no μGraph found is estimated faster (the best, {'c' * 16}, 0.96x)"


def test_the_command_lines_verdict_says_why_a_reference_is_kept() -> None:
    """README: where no μGraph is chosen "the output then says so": the summary line's reason, as
    `describe()` and `show` give it."""
    from mugraph.dashboards.console import verdict_lines

    ref = {**REFERENCE, "kernels": 1}
    done = {
        "program": "p", "complete": True, "mugraphs": [], "tasks_run": 1, "states": 10, "solver_calls": 1,
        "seconds": 1.0, "ranking": {"f0": [ref]}, "reference": {"f0": ref}, "best_per_fragment": {"f0": ref["digest"]},
        "store": "s.zarr", "report": "s.html",
    }  # fmt: skip
    lines = verdict_lines(done, "H100")
    kept = "its whole search space holds no μGraph equal to it other than the reference itself"
    assert lines[2] == f"    the reference is kept: {kept}"


def test_near_tie_times_apart_below_a_tenth_of_a_microsecond_get_more_digits() -> None:
    from mugraph.cli.show import _tie_values

    assert _tie_values("roofline_seconds", [3.0e-6, 3.04e-6]) == "3 μs against 3.04 μs"
    assert _tie_values("roofline_seconds", [3.0e-6, 4.0e-6]) == "3.0 μs against 4.0 μs"


def test_a_mugraph_of_no_kernel_is_not_said_to_be_0_00x() -> None:
    """Its estimate is 0 s and its stored speedup 0 (no ratio to take): the tables say ∞x, not a
    slowdown to nothing."""
    from mugraph.ir.together import speedup_text

    assert speedup_text(0.0) == "∞x"
    assert speedup_text(1.36) == "1.36x"


def test_a_pytorch_reference_is_said_in_the_calls_it_is_priced_as() -> None:
    """A linear layer's kept reference holds a matmul and an add (two kernels in the graph) and runs,
    and is priced as, one `addmm`: the summary says what it is priced as; a μGraph says its kernels."""
    from mugraph.stages.layout.describe import what_runs
    from mugraph.stages.layout.emitted import MODEL, TORCH_MODEL

    reference = {"reference": True, "model": TORCH_MODEL, "kernels": 2, "emitted_launches": 1}
    assert what_runs(reference) == "1 PyTorch call"
    assert what_runs({**reference, "reference": False}) == "2 kernels"
    assert what_runs({**reference, "model": MODEL}) == "2 kernels"  # a built-in program's reference


def test_the_headline_counts_a_pytorch_reference_in_calls() -> None:
    """`show` said "2 kernels against 2" for a kept linear layer the summary called "1 PyTorch call"."""
    from mugraph.stages.layout.emitted import TORCH_MODEL

    reference = {**REFERENCE, "model": TORCH_MODEL, "kernels": 2, "emitted_launches": 1}
    slower = row("s" * 64, 13.7e-6 / 0.8)
    head = headline([reference, slower])
    assert head is not None
    assert "1 PyTorch call against 1 PyTorch call" in head["line"], head["line"]


def test_the_why_line_counts_a_pytorch_reference_as_the_headline_does() -> None:
    """`show` said "1 kernel against 2 PyTorch calls" and, on the next line, "why: 1 kernel vs 3": the
    why line now counts a model's kept reference in the calls it is priced as too."""
    from mugraph.stages.layout.emitted import MODEL, TORCH_MODEL

    emitted = {"emitted_launch_seconds": 3e-6, "emitted_dram_seconds": 1e-6, "emitted_serial_seconds": 0.0}
    reference = {**REFERENCE, **emitted, "model": TORCH_MODEL, "kernels": 3, "emitted_launches": 2}
    faster = {**row("f" * 64, 13.7e-6 / 2.0), **emitted, "kernels": 1}
    head = headline([faster, reference])
    assert head is not None
    assert "1 kernel against 2 PyTorch calls" in head["line"], head["line"]
    assert head["why"].startswith("1 kernel vs 2 PyTorch calls;"), head["why"]
    built_in = headline([{**faster, "model": MODEL}, {**reference, "model": MODEL}])
    assert built_in is not None
    assert built_in["why"].startswith("1 kernel vs 3;"), built_in["why"]
