"""Marking a built-in program's experts in `show` and the report."""

from __future__ import annotations

from mugraph.dashboards.experts import expert_labels, expert_note
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.serialize import digest
from mugraph.programs import get_builtin


def test_experts_of_the_run_program_by_canonical_digest() -> None:
    prog = get_builtin("rms_norm")
    identity = {"program": "rms_norm", "program_digest": digest(prog.reference())}
    labels = expert_labels(identity, [{"name": "f0"}])
    assert labels == {canonical_digest(b()): label for label, b in prog.experts.items()}
    assert set(labels.values()) == set(prog.experts) and len(labels) == len(prog.experts)
    # another reference under the same name (a file called rms_norm.py), or several fragments: no marks
    assert expert_labels({**identity, "program_digest": "0" * 64}, [{"name": "f0"}]) == {}
    assert expert_labels(identity, [{"name": "f0"}, {"name": "f1"}]) == {}
    assert expert_labels({"program": "no-such-program"}, [{"name": "f0"}]) == {}


def test_expert_note_gives_each_expert_its_rank_or_says_it_was_not_found() -> None:
    ranking: list[dict[str, object]] = [{"digest": "a"}, {"digest": "ref", "reference": True}, {"digest": "b"}]
    assert expert_note({"b": "fused", "z": "paper"}, ranking) == (
        "expert 'fused' ranks 3 of 3; expert 'paper' was not found (`mugraph explain` says why)"
    )
    assert expert_note({}, ranking) == ""
    stopped = expert_note({"z": "paper"}, ranking, complete=False)
    assert stopped.startswith("expert 'paper' is not found yet: the search stopped before its end")
