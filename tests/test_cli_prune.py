"""`mugraph prune`: the oracle on every intermediate of the experts, with each kind of memo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli_json import run, summary


def test_prune_reports_which_experts_the_search_can_reach(tmp_path: Path) -> None:
    s = summary(run("prune", "lora", "--memo-url", "local", "--json", cwd=tmp_path))
    experts = {row["expert"]: row for row in s["experts"]}
    assert experts["saved"]["reachable"] is True and experts["saved"]["pruned"] == []
    # the concat intermediates are not subexpressions under Mirage's axioms (no saved graph uses concat)
    assert experts["concat"]["reachable"] is False and "K1.s5" in experts["concat"]["pruned"]
    assert s["solver_calls"] > 0 and s["memo"] == "lru"


def test_private_redis_keeps_verdicts_between_runs(tmp_path: Path) -> None:
    first = summary(run("prune", "gqa", "--json", "--memo-dir", "memo", cwd=tmp_path))
    second = summary(run("prune", "gqa", "--json", "--memo-dir", "memo", cwd=tmp_path))
    assert first["solver_calls"] > 0 and first["memo"] == "lru+redis"
    assert second["solver_calls"] == 0
    assert second["memo_counters"]["remote_hits"] == first["solver_calls"]
    assert second["experts"] == first["experts"]
    assert (tmp_path / "memo").is_dir()


def test_unreachable_memo_server_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = run("prune", "lora", "--memo-url", "redis://127.0.0.1:1/0", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "cannot reach the memo server" in proc.stderr


def test_the_memo_url_is_read_from_the_environment_off_the_command_line(tmp_path: Path) -> None:
    """$MUGRAPH_MEMO_URL keeps a Redis password out of `ps`: the URL is taken from there, and the
    password is not printed."""
    env = {**os.environ, "MUGRAPH_MEMO_URL": "redis://:hunter2secret@127.0.0.1:1/0"}
    proc = subprocess.run(
        [sys.executable, "-m", "mugraph.cli", "prune", "lora"], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert proc.returncode == 2 and "cannot reach the memo server" in proc.stderr, proc.stderr
    assert "hunter2secret" not in proc.stderr + proc.stdout
    env["MUGRAPH_MEMO_URL"] = "local"
    s = summary(
        subprocess.run(
            [sys.executable, "-m", "mugraph.cli", "prune", "lora", "--json"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
        )
    )
    assert s["memo"] == "lru"


def _parts(line: str) -> tuple[int, list[int]]:
    """The queries of `prune`'s last line and the count of each part it splits them into."""
    head, _, rest = line.partition(": ")
    return int(head.split()[0]), [int(part.split()[0]) for part in rest.split(", ")]


def test_the_summary_parts_add_up_to_the_queries(tmp_path: Path) -> None:
    """rms_norm's two experts share intermediates (the second's are answered for the first); one of
    lora's experts holds a term twice. Every part is named and they add up; a zero part is not said."""
    rms = run("prune", "rms_norm", "--memo-url", "local", cwd=tmp_path).stdout.splitlines()[-1]
    queries, parts = _parts(rms)
    assert sum(parts) == queries and "answered for an earlier expert" in rms and "memo hit" not in rms, rms
    lora = run("prune", "lora", "--memo-url", "local", cwd=tmp_path).stdout.splitlines()[-1]
    queries, parts = _parts(lora)
    assert sum(parts) == queries and "repeated within one expert" in lora, lora


def test_memo_hits_of_each_kind_are_named_and_add_up() -> None:
    from mugraph.cli.prune import _answers_line
    from mugraph.stages.prune.oracle import OracleCounters

    c = OracleCounters(queries=20, prefiltered=2, memo_hits=12, solver_calls=3, claim_waits=1)
    line = _answers_line(c, {"local_hits": 4, "remote_hits": 6}, "redis", "z3")
    assert line == (
        "20 queries: 3 Z3 calls in 0.00 s (0 unknown), 2 refuted by finite models, 3 answered for an "
        "earlier expert, 4 local memo hits, 5 redis memo hits, 1 solved meanwhile by another process, "
        "2 terms repeated within one expert"
    )
    one = OracleCounters(queries=1, solver_calls=1)
    assert _answers_line(one, {"local_hits": 0, "remote_hits": 0}, "shared") == (
        "1 query: 1 decided from normal forms in 0.00 s (0 undecided)"
    )


def test_z3s_limit_is_asked_of_z3_and_refused_without_it(tmp_path: Path) -> None:
    """The normal forms decide every lora query; under `--oracle z3` the rlimit decides how many end
    `unknown` (and are pruned), so `--rlimit` is refused where it would change nothing."""
    exact = summary(run("prune", "lora", "--memo-url", "local", "--json", cwd=tmp_path))
    assert exact["oracle"] == "normal_form" and exact["unknowns"] == 0
    z3 = summary(run("prune", "lora", "--oracle", "z3", "--memo-url", "local", "--json", cwd=tmp_path))
    starved = summary(
        run("prune", "lora", "--oracle", "z3", "--rlimit", "1", "--memo-url", "local", "--json", cwd=tmp_path)
    )
    assert z3["oracle"] == "z3" and z3["solver_calls"] == starved["solver_calls"] > 0
    assert starved["unknowns"] == starved["solver_calls"] > z3["unknowns"]
    kept = {r["expert"]: r["reachable"] for r in exact["experts"]}
    assert kept["saved"] and not {r["expert"]: r["reachable"] for r in starved["experts"]}["saved"]
    refused = run("prune", "lora", "--rlimit", "5", cwd=tmp_path)
    assert refused.returncode == 2 and "--oracle z3" in refused.stderr


def test_a_pruned_concat_is_said_to_bar_nothing_where_a_matmul_reads_it(tmp_path: Path) -> None:
    """lora's `concat` expert has two concats pruned and is found by the search (which makes a concat
    with the matmul reading it in one step): the text says so under them, not only the docs."""
    from mugraph.cli.prune import CONCAT_NOTE

    out = run("prune", "lora", "--memo-url", "local", cwd=tmp_path).stdout
    concat = out.split("lora [concat]:", 1)[1]
    assert "pruned K1.s5" in concat and f"  {CONCAT_NOTE}" in concat.splitlines()
    assert CONCAT_NOTE not in out.split("lora [concat]:", 1)[0]  # not under the expert with nothing pruned
