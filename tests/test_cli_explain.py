"""`explain`'s reasons say what excludes an expert without contradicting themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mugraph.cli import main

TWICE = str(Path(__file__).parent / "programs" / "files" / "x_read_twice.py")


@pytest.mark.parametrize("rule", ["subsets", "mirage"])
def test_a_block_graph_that_reads_one_tensor_twice(rule: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The expert's block graph loads X twice; the search's block graphs read X, W1, W3 (or a part)
    once each. The reason says X is read twice, not that the expert reads what the search reads."""
    main(["explain", TWICE, "--memo-url", "local", "--set", f"block_inputs={rule}", "--json"])  # exits only on errors
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["rule"] == "block inputs" and not row["inside"]
    reason = row["reason"]
    assert "reads X more than once" in reason and "reads each tensor once: X, W1, W3" in reason, reason
    assert "reads X, W1, W3, but" not in reason


def test_the_readme_s_own_program_has_its_expert_inside_its_default_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The program README.md shows under 'Your own program', as a user saves it: with no preset named,
    `explain` finds its expert inside the space its file gets."""
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Your own program", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "preset" not in code and "experts = " in code
    path = tmp_path / "my_program.py"
    path.write_text(code, encoding="utf-8")
    main(["explain", str(path), "--memo-url", "local", "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert rows and all(r["inside"] for r in rows), rows


def test_a_program_without_experts_has_nothing_to_explain_and_that_is_no_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A CI gate running `explain` over every program: one with no experts (transformer_block) ends 0,
    as `check` of it does, and says why nothing was explained."""
    main(["explain", "transformer_block", "--memo-url", "local", "--json"])  # exits only on errors
    captured = capsys.readouterr()
    assert captured.out == "" and "transformer_block has no expert μGraphs to explain" in captured.err


def test_an_attention_program_file_under_mlp_is_pointed_at_the_attention_preset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A program file naming no preset is searched with mlp, whose grids hold no (batch, y, z): the
    grid rule offers the attention grids, and a note names the preset that has them."""
    path = tmp_path / "my_gqa.py"
    path.write_text(
        "from mugraph.programs.benchmarks import gqa_expert, gqa_reference\n"
        "reference = gqa_reference\n"
        "experts = {'mine': gqa_expert}\n"
    )
    main(["explain", str(path), "--memo-url", "local"])
    out = capsys.readouterr().out
    assert "my_gqa [mine]: outside the space (grid): the expert's grid [2, 16, 4] is not a candidate" in out
    assert "--set 'attention_grids=true' would admit it" in out
    assert "note: my_gqa computes an exp (an attention's softmax) and is searched with the mlp preset" in out
    path.write_text(path.read_text() + "preset = 'attention'\n")
    main(["explain", str(path), "--memo-url", "local"])
    out = capsys.readouterr().out
    assert "my_gqa [mine]: inside the space" in out and "note:" not in out
    # an exp on a plain grid (README's exp(X·W), its for-loop range outside the space): no such note
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    code = readme.split("## Your own program", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    path.write_text(code.replace("forloop=4", "forloop=128"))
    main(["explain", str(path), "--memo-url", "local"])
    out = capsys.readouterr().out
    assert "outside the space (for-loop range)" in out and "note:" not in out
