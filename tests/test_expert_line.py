"""What a finished run says of a program's experts when the search found them: an expert is found
when, in the reference's order by name, it is one of the found μGraphs (and then no inputs are drawn
to test it), and an expert whose outputs stand under each other's names is not found, even where its
graph as written is one of them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import mugraph.run.expert as expert_module
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.serialize import dumps
from mugraph.programs import Program, resolve_program
from mugraph.run.expert import as_found, expert_line
from mugraph.stages.search.config import preset_config

QK = str(Path(__file__).parent / "programs" / "files" / "qk_proj.py")
EQUIVALENT = ("right", "reordered", "inputs_reordered")


def _lines(prog: Program, found: set[str]) -> dict[str, str]:
    line = expert_line(prog, [(dumps(prog.reference()), preset_config(prog.preset))], found)
    assert line is not None
    return {ln.split("'")[1]: ln for ln in line.splitlines()}


def _found(prog: Program) -> set[str]:
    """What a search of the program finds of its experts: the right one, and the swapped one's graph
    as written (a μGraph computing Q and K in the other order, as a search of that program would)."""
    right = as_found(prog.reference(), prog.experts["right"]())
    return {canonical_digest(right), canonical_digest(prog.experts["swapped"]())}


def test_an_expert_found_by_the_search_is_found_and_a_swapped_one_is_not() -> None:
    prog = resolve_program(QK)
    lines = _lines(prog, _found(prog))
    for label in EQUIVALENT:
        assert lines[label] == f"expert {label!r} found", lines
    assert lines["swapped"].startswith("expert 'swapped' NOT found: ") and "not equivalent" in lines["swapped"]


def test_experts_found_are_not_tested_on_drawn_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a found expert was tested on drawn inputs")

    monkeypatch.setattr(expert_module, "ReferenceCheck", refuse)
    prog = resolve_program(QK)
    found_only = dataclasses.replace(prog, experts={k: v for k, v in prog.experts.items() if k in EQUIVALENT})
    assert set(_lines(found_only, _found(prog)).values()) == {f"expert {label!r} found" for label in EQUIVALENT}
