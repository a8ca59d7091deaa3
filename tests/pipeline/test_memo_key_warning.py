"""A local cluster's run given a shared memo server but no $MUGRAPH_MEMO_KEY seals its verdicts with a
key its store made for itself, so it reads none of other runs' (0 remote hits): one line at its start
says so and how to share them. With the key set, or with a cluster of one's own (whose workers' key
counts, and which says where they have none), nothing is said. Real runs on a real redis-server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.cli_runs import events, optimize_args

SAID = "verdicts are shared only with runs that use the same key"


def _run(cwd: Path, url: str, key: str | None) -> tuple[str, dict[str, object]]:
    """A narrowed rms_norm run on the shared memo at `url`; (its stderr, its `done` event)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "MUGRAPH_MEMO_KEY"}
    if key is not None:
        env["MUGRAPH_MEMO_KEY"] = key
    args = optimize_args("rms_norm", cwd / f"run-{key}.zarr", "--workers", "1")
    proc = subprocess.run(
        [sys.executable, "-m", "mugraph", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**env, "PYTHONUNBUFFERED": "1", "MUGRAPH_MEMO_URL": url},
    )
    return proc.stderr, events(proc)[-1]


@pytest.mark.parametrize("key", [None, ""])
def test_a_shared_memo_without_a_key_is_said_once(tmp_path: Path, own_redis_url: str, key: str | None) -> None:
    err, done = _run(tmp_path, own_redis_url, key)
    lines = [ln for ln in err.splitlines() if SAID in ln]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith("mugraph: warning: the shared memo at ") and "$MUGRAPH_MEMO_KEY" in lines[0]
    assert "memo.key" in lines[0] and "mugraph_key" not in lines[0]  # where the key is; never the key itself
    assert done["event"] == "done"


def test_a_shared_memo_with_a_key_says_nothing(tmp_path: Path, own_redis_url: str) -> None:
    err, _ = _run(tmp_path, own_redis_url, "k" * 32)
    assert SAID not in err and "MUGRAPH_MEMO_KEY" not in err, err[-3000:]
