"""The CPU one `mugraph optimize` run's driver process spends, against the workers' task seconds.

    python benchmarks/driver_cpu.py STORE -- mugraph optimize lora --workers 2 --store STORE ...

Runs the command, samples its own process's CPU time (/proc, user + system, not its children's)
every quarter second until it exits, then reads the run store for the task seconds its workers
spent (on a resumed store, only the tasks this run did). Prints one JSON line: wall, driver CPU,
task seconds, tasks and the ratio. On Linux only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def own_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` itself (children not counted)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sample(proc: subprocess.Popen[bytes]) -> tuple[float, list[tuple[float, float]]]:
    """The process's last CPU reading and every (seconds since start, CPU) sample, until it exits."""
    t0 = time.perf_counter()
    cpu = 0.0
    samples: list[tuple[float, float]] = []
    while proc.poll() is None:
        now = own_cpu(proc.pid)
        if now is not None:
            cpu = now
            samples.append((time.perf_counter() - t0, now))
        time.sleep(0.25)
    return cpu, samples


def _done_rows(store: Path) -> dict[int, dict[str, float]]:
    """The counters of each done task row of `store` (none if it does not exist yet)."""
    from mugraph.storage.run.store import RunStore

    if not (store / "zarr.json").exists():
        return {}
    with RunStore.open_existing(store) as rs:
        return {t.row: t.counters for t in rs.tasks() if t.done}


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        raise SystemExit(__doc__)
    store, command = Path(sys.argv[1]), sys.argv[3:]
    fresh = "--fresh" in command
    before = {} if fresh else _done_rows(store)  # a resumed run: count only the tasks it runs
    t0 = time.perf_counter()
    events = store.parent / f"{store.name}.ndjson"
    with events.open("w") as out:
        proc = subprocess.Popen(command, stdout=out)
        cpu, samples = _sample(proc)
    wall = time.perf_counter() - t0
    done = [c for row, c in _done_rows(store).items() if row not in before]
    task_s = sum(c.get("seconds", 0.0) for c in done)
    states = sum(c.get("nodes", 0.0) for c in done)
    # CPU after start-up: from the first sample past 10% of the wall (imports and cluster start-up)
    later = [s for s in samples if s[0] >= 0.1 * wall]
    steady = cpu - later[0][1] if later else cpu
    lines = [line for line in events.read_text().splitlines() if line.startswith("{")]
    last = json.loads(lines[-1]) if lines else {}
    print(
        json.dumps(
            {
                "command": " ".join(command),
                "rc": proc.returncode,
                "wall_s": round(wall, 1),
                "driver_cpu_s": round(cpu, 2),
                "driver_cpu_after_10pct_s": round(steady, 2),
                "tasks_done": len(done),
                "states": int(states),
                "task_seconds": round(task_s, 1),
                "ratio": f"1/{task_s / cpu:.0f}" if cpu else None,
                "last_event": {k: v for k, v in last.items() if not isinstance(v, (list, dict))},
            }
        )
    )


if __name__ == "__main__":
    main()
