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
