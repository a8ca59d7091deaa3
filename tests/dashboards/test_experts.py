"""Marking the run's program's experts in `show` and the report: as the store recorded them, or, for
a store made before it kept them, a built-in program's."""

from __future__ import annotations

from mugraph.dashboards.experts import expert_labels, expert_marks, expert_note
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.serialize import digest
from mugraph.programs import get_builtin
from mugraph.storage.run.run_records import ExpertRecord


def test_a_store_without_the_record_gets_the_built_in_experts_by_canonical_digest() -> None:
    prog = get_builtin("rms_norm")
    identity = {"program": "rms_norm", "program_digest": digest(prog.reference())}
    labels = expert_labels(identity, [{"name": "f0"}], None)
    assert labels == [(label, canonical_digest(b())) for label, b in prog.experts.items()]
    # another reference under the same name (a file called rms_norm.py), or several fragments: no marks
    assert expert_labels({**identity, "program_digest": "0" * 64}, [{"name": "f0"}], None) == []
    assert expert_labels(identity, [{"name": "f0"}, {"name": "f1"}], None) == []
    assert expert_labels({"program": "no-such-program"}, [{"name": "f0"}], None) == []


def test_the_recorded_experts_win_over_a_built_in_of_the_same_reference() -> None:
    prog = get_builtin("rms_norm")
    identity = {"program": "rms_norm", "program_digest": digest(prog.reference())}
    recorded: list[ExpertRecord] = [{"label": "mine", "digest": "b"}, {"label": "wide", "digest": "a"}]
    assert expert_labels(identity, [{"name": "f0"}], recorded) == [("mine", "b"), ("wide", "a")]
    assert expert_labels(identity, [{"name": "f0"}], []) == []  # the run's program has none


def test_expert_note_gives_each_expert_its_rank_or_says_it_was_not_found() -> None:
    ranking: list[dict[str, object]] = [{"digest": "a"}, {"digest": "ref", "reference": True}, {"digest": "b"}]
    assert expert_note([("fused", "b"), ("paper", "z")], ranking) == (
        "expert 'fused' ranks 3 of 3; expert 'paper' was not found (`mugraph explain` says why)"
    )
    assert expert_note([], ranking) == ""
    stopped = expert_note([("paper", "z")], ranking, complete=False)
    assert stopped.startswith("expert 'paper' is not found yet: the search has not reached its end")


def test_experts_that_are_one_mugraph_mark_its_row_with_both_labels() -> None:
    assert expert_marks([("a", "d1"), ("b", "d2"), ("c", "d1")]) == {"d1": "a, c", "d2": "b"}
