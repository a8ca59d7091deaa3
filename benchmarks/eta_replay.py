"""How far the progress line's ETA was from the time a run really had left, replayed from stores.

At every timeline sample from 3% to 90% of a run's last invocation, the ETA the line would show is
(estimated states - states) / rate, for two rates: the invocation's average (`states_per_s`) and the
rate since its first sample with states (`states_per_s_searching`, what the ETA uses). Each is
compared with the seconds the run had left, as a factor either way; the median and worst factors are
printed per store, with the number of samples that had no rate yet.

    python benchmarks/eta_replay.py runs/gqa-*.zarr runs/lora-*.zarr
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mugraph.storage.run.backends import open_existing


def factors(samples: Sequence[dict[str, Any]], since_first: bool) -> tuple[list[float], int]:
    """The ETA's factors off the truth, and the samples without a rate."""
    end = float(samples[-1]["seconds"])
    first = next((s for s in samples if s["states"] > 0), None)
    out: list[float] = []
    unknown = 0
    for s in samples:
        now, est = float(s["seconds"]), s.get("estimated_states")
        if est is None or first is None or not 0.03 <= now / end <= 0.9:
            continue
        if since_first:
            dt = now - float(first["seconds"])
            rate = (s["states"] - first["states"]) / dt if dt > 0 else 0.0
        else:
            rate = float(s["states_per_s"])
        if rate <= 0:
            unknown += 1
            continue
        eta = (max(est, s["states"]) - s["states"]) / rate
        out.append(math.exp(abs(math.log(max(eta, 0.1) / (end - now)))))
    return sorted(out), unknown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    args = ap.parse_args()
    for path in args.stores:
        with open_existing(path, readonly=True) as st:
            samples: list[dict[str, Any]] = [dict(s) for s in st.timeline()[-1]]
        cells = []
        for since_first in (False, True):
            f, unknown = factors(samples, since_first)
            cells.append(f"{f[len(f) // 2]:.2f} / {f[-1]:.1f} ({unknown} unknown)" if f else "-")
        run = float(samples[-1]["seconds"])
        print(f"{path}: run {run:.1f} s; average rate {cells[0]}; since first {cells[1]}")


if __name__ == "__main__":
    main()
