"""A run started with `--fresh` (or `fresh=True`) that stops before its end, interrupted or at its
time limit, says to go on without the flag: the same command would delete the store it made and start
from nothing."""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli_runs import mugraph, start

FRESH_LINE = "mugraph: interrupted; run the same command without --fresh to resume"


def _args(store: Path, *extra: str) -> list[str]:
    return ["optimize", "rms_norm", "--workers", "1", "--store", str(store), "--dashboard-address", "none", *extra]


def test_an_interrupted_fresh_run_says_to_leave_fresh_out(tmp_path: Path) -> None:
    proc = start(_args(tmp_path / "run.zarr", "--fresh"), tmp_path)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("mugraph: starting"), first
        os.killpg(proc.pid, signal.SIGINT)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, rest
    assert rest.strip().splitlines()[-1] == FRESH_LINE, rest


def test_a_fresh_run_stopped_at_its_time_limit_says_to_leave_fresh_out(tmp_path: Path) -> None:
    proc = mugraph(*_args(tmp_path / "run.zarr", "--fresh", "--time-limit", "1"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0]
    assert "search stopped at the time limit (run the same command without --fresh to resume)" in first, first
    # said the moment the limit is reached, not only in the summary after the confirmations
    assert "mugraph: time limit reached (1 s): search stopped" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("fresh", [True, False])
def test_the_library_says_how_to_call_it_again(tmp_path: Path, fresh: bool) -> None:
    """Through `run_optimize` (as `mugraph.optimize`): the `done` event's advice, which the verbose
    verdict prints, and a note under the KeyboardInterrupt of an interrupted call."""
    from mugraph.run.execute import run_optimize
    from mugraph.run.options import OptimizeOptions

    options = OptimizeOptions(workers=1, store=tmp_path / "run.zarr", dashboard_address=None, fresh=fresh)
    stopped = run_optimize("rms_norm", dataclasses.replace(options, time_limit=1.0))
    assert not stopped["complete"]
    advice = "call it again without fresh=True to resume" if fresh else "call it again to resume"
    assert stopped["resume"] == advice

    def interrupt(e: Any) -> None:
        if e["event"] == "start":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        run_optimize("rms_norm", options, on_event=interrupt)
    assert info.value.__notes__ == [f"mugraph: interrupted; {advice}"]
