"""Where a `mugraph optimize` run's driver spends its CPU: the CLI run in this process, with the
thread CPU of the driver's main steps summed and the Dask tasks it submits counted. Its own polling
thread costs the process about 1 ms of CPU a second: the record gives it (`poll_cpu`) and the
process's CPU without it (`driver_cpu`).

    python benchmarks/driver_attr.py optimize lora --workers 2 --store runs/lora.zarr --fresh --json

Wraps, for the run's duration, the driver's loop steps (handling a batch, the commit, the progress
sample, the timeline write, the store's task commit, the submissions, the gather) with
`time.thread_time()` sums, and `Client.map` with a count of the tasks it makes; a thread reads every
thread's CPU from /proc once a second (the event-loop thread ends before the process does). At exit
it prints one line to stderr: `ATTR {json}` with the process's CPU, the counts and sums per step,
and the CPU of each thread. Linux only. Nested calls of one step count once.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from distributed import Client

from mugraph.pipeline import commit, dispatch, driver, sampling
from mugraph.storage.run.store import RunStore

STEPS: list[tuple[Any, str]] = [
    (driver.Driver, "run"),
    (driver.Driver, "_handle"),
    (driver.Driver, "_linger"),
    (commit.Results, "commit"),
    (sampling.Sampler, "sample"),
    (dispatch.Dispatch, "searches"),
    (dispatch.Dispatch, "refresh"),
    (RunStore, "put_timeline"),
    (RunStore, "complete_tasks"),
    (Client, "gather"),
]
seconds: dict[str, float] = {}
calls: dict[str, int] = {}
submitted = {"maps": 0, "tasks": 0}
threads_seen: dict[str, float] = {}
poll_thread: dict[str, int] = {}  # the native id of this tool's own polling thread


def _timed(owner: Any, name: str) -> None:
    fn = getattr(owner, name)
    label = f"{owner.__name__}.{name}"
    inside = threading.local()

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if getattr(inside, "on", False):
            return fn(*args, **kwargs)
        inside.on, start = True, time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            inside.on = False
            seconds[label] = seconds.get(label, 0.0) + time.thread_time() - start
            calls[label] = calls.get(label, 0) + 1

    setattr(owner, name, timed)


def _threads() -> dict[str, float]:
    """CPU seconds of each thread of this process, named `comm-tid`."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    root = Path(f"/proc/{os.getpid()}/task")
    for tid in os.listdir(root):
        try:
            name = (root / tid / "comm").read_text().strip()
            fields = (root / tid / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[f"{name}-{tid}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _poll() -> None:
    poll_thread["id"] = threading.get_native_id()
    while True:
        threads_seen.update(_threads())
        time.sleep(1.0)


def _report() -> None:
    threads_seen.update(_threads())
    cpu = os.times()
    own = next((v for k, v in threads_seen.items() if k.endswith(f"-{poll_thread.get('id')}")), 0.0)
    record = {
        "process_cpu": round(cpu.user + cpu.system, 3),
        "poll_cpu": own,  # this tool's polling thread, in process_cpu: subtract it for the driver's own
        "driver_cpu": round(cpu.user + cpu.system - own, 3),
        "maps": submitted["maps"],
        "dask_tasks": submitted["tasks"],
        "seconds": {k: round(v, 3) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])},
        "calls": calls,
        "threads": threads_seen,
    }
    print("ATTR " + json.dumps(record), file=sys.stderr)


def main() -> None:
    for owner, name in STEPS:
        _timed(owner, name)
    mapped = Client.map

    def counted(self: Client, func: Any, *iterables: Any, **kwargs: Any) -> Any:
        futures = mapped(self, func, *iterables, **kwargs)
        submitted["maps"] += 1
        submitted["tasks"] += len(futures)
        return futures

    Client.map = counted  # type: ignore[method-assign]
    threading.Thread(target=_poll, daemon=True, name="cpu-poll").start()
    atexit.register(_report)
    from mugraph.cli import main as cli

    sys.argv = ["mugraph", *sys.argv[1:]]
    cli()


if __name__ == "__main__":
    main()
