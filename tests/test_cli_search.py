"""`mugraph search`: one serial search from the command line, its JSON summary, its memo, its errors."""

from __future__ import annotations

import json
from pathlib import Path

from mugraph.cli.records import SearchSummary
from mugraph.ir.canonical import canonical_digest
from mugraph.programs.benchmarks import lora_expert_saved
from tests.helpers.cli_json import run, summary
from tests.helpers.narrow import NARROW


def settings(name: str) -> list[str]:
    out = []
    for key, value in NARROW[name].items():
        out += ["--set", f"{key}={json.dumps(value)}"]
    return out


def test_search_lora_finds_the_expert(tmp_path: Path) -> None:
    proc = run("search", "lora", *settings("lora"), "--memo-url", "local", "--json", "--budget", "700", cwd=tmp_path)
    s = summary(proc)
    assert s["program"] == "lora" and s["preset"] == "lora" and s["complete"] is True
    assert s["expert_found"] is True and canonical_digest(lora_expert_saved()) in s["digests"]
    assert s["mugraphs"] == len(s["digests"]) >= 1 and s["states"] > 1000 and s["tasks"] > 1
    assert s["solver_calls"] > 0 and s["seconds"] > 0
    assert set(s) == set(SearchSummary.__annotations__)  # the record names every field printed
    assert "states" in proc.stderr  # the progress line


def test_private_redis_memo_spares_the_second_search(tmp_path: Path) -> None:
    args = ["search", "rms_norm", *settings("rms_norm"), "--json", "--memo-dir", "memo"]
    first = summary(run(*args, cwd=tmp_path))
    second = summary(run(*args, cwd=tmp_path))
    assert first["solver_calls"] > 0 and second["solver_calls"] == 0
    assert second["digests"] == first["digests"] and second["paths"] == first["paths"]
    assert second["states"] == first["states"] and second["expert_found"] is True


def test_time_limit_stops_with_a_frontier(tmp_path: Path) -> None:
    s = summary(
        run("search", "lora", "--time-limit", "1s", "--budget", "50", "--memo-url", "local", "--json", cwd=tmp_path)
    )
    assert s["complete"] is False and s["frontier"] > 0 and s["states"] >= 50


def test_an_expert_not_reached_before_the_time_limit_is_not_found_yet(tmp_path: Path) -> None:
    """A search stopped at its time limit has not reached an expert inside its space: it says so as
    `optimize` does, never "NOT found: inside the space"."""
    args = ["search", "rms_norm", *settings("rms_norm"), "--time-limit", "0.01", "--budget", "1", "--memo-url", "local"]
    text = run(*args, cwd=tmp_path).stdout
    said = "expert 'expert' not found yet: the search stopped at its time limit; it lies inside the space, at root "
    assert said in text and "NOT found: inside" not in text, text
    assert "other experts: paper NOT found: outside the space (grid)" in text
    s = summary(run(*args, "--json", cwd=tmp_path))
    assert s["complete"] is False and s["expert_found"] is False
    assert str(s["expert_reason"]).startswith("the search stopped at its time limit; it lies inside the space")


def test_bad_input_is_one_line_and_status_2(tmp_path: Path) -> None:
    for args, needle in [
        (["search", "lora", "--set", "bogus=1"], "unknown search setting 'bogus'"),
        (["search", "lora", "--set", "franges=[1]"], "at least 2"),
        (["search", "lora", "--preset", "nope"], "nope"),
        (["search", "lora", "--time-limit", "soon"], "duration"),
        (["search", "no_such_program"], "unknown program"),
    ]:
        proc = run(*args, "--memo-url", "local", cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_search_reports_every_expert(tmp_path: Path) -> None:
    """rms_norm has two experts; the summary names both, each found or with the reason it is not."""
    args = ["--set", "grids=[[64,1,1]]", "--set", "kernel_ops=[]", "--set", "franges=[16]", "--memo-url", "local"]
    s = summary(run("search", "rms_norm", *args, "--json", cwd=tmp_path))
    assert set(s["experts"]) == {"expert", "paper"}
    assert s["experts"]["expert"]["found"] is s["expert_found"] is False
    assert "for-loop range" in str(s["experts"]["expert"]["reason"])
    assert s["experts"]["paper"]["found"] is False and "grid" in str(s["experts"]["paper"]["reason"])
    text = run("search", "rms_norm", *args, cwd=tmp_path).stdout
    assert "other experts: paper NOT found: outside the space (grid)" in text
