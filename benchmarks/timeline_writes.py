"""What the driver's timeline writes cost over one run, for two write rules side by side: the rule
of `pipeline.sampling.timeline_write_interval` and the earlier one (every 30 s, then 4% of the time
run). A copy of a finished store's timeline is rewritten as a run would write it (about one sample a
second), and the CPU seconds of the writes are summed.

    python benchmarks/timeline_writes.py runs/lora-*.zarr
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mugraph.pipeline.sampling import timeline_write_interval
from mugraph.storage.run.store import RunStore


def write_times(rule: Callable[[float], float], end: int) -> list[int]:
    """The seconds at which `rule` writes, sampling once a second as the driver does."""
    last, out = -1e9, []
    for t in range(end + 1):
        if t - last >= rule(float(t)):
            out.append(t)
            last = t
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.zarr"
        shutil.copytree(args.store, copy)
        with RunStore.open_existing(copy, readonly=False) as st:
            invocations = st.timeline()
            samples, inv = invocations[-1], len(invocations) - 1
            end = int(float(samples[-1]["seconds"]))
            rules = {"earlier": lambda e: max(30.0, 0.04 * e), "today": timeline_write_interval}
            for name, rule in rules.items():
                times = write_times(rule, end)
                t0 = time.process_time()
                for t in times:
                    st.put_timeline(inv, samples[: max(1, min(len(samples), t))])
                print(f"{name}: {len(times)} writes over {end} s, {time.process_time() - t0:.3f} CPU s")


if __name__ == "__main__":
    main()
