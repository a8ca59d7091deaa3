"""Time the model's best μGraphs of each fragment on a GPU worker and rank by what the GPU says.

After the search, the roofline model's K best μGraphs of every fragment, and the fragment's reference,
are emitted as Triton kernels and timed on a worker that declared the Dask resource `GPU` (CPU-only
workers never take these tasks). Tasks go one at a time, so no two timings share the GPU. Every
measurement is written to the run store as it arrives: a stopped run keeps what it timed, and a rerun
with the same or a larger K times only what is missing. Task keys are `measure-<fragment>-<digest>`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from distributed import Client

from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps
from mugraph.pipeline.events import EventSink
from mugraph.pipeline.plan import FragmentPlan
from mugraph.pipeline.worker import measure_task
from mugraph.stages.layout.rank import measured_first
from mugraph.stages.layout.rows import RankedRow, ranked_rows
from mugraph.storage.run.protocol import RunStoreWriter
from mugraph.storage.run.run_records import MeasurementRecord

NO_GPU = (
    "--measure times μGraphs on a GPU worker, and this cluster has none (a worker with the Dask resource "
    "GPU: the local cluster declares it where CuPy finds a CUDA device; `dask worker --resources GPU=1` "
    "elsewhere)"
)


def to_measure(ordered: Sequence[RankedRow], measured: Mapping[str, object], k: int) -> list[str]:
    """Digests to time: the first `k` μGraphs of a model ranking and the reference, less those timed."""
    top = [r["digest"] for r in ordered if not r["reference"]][:k]
    ref = [r["digest"] for r in ordered if r["reference"]]
    return [d for d in top + ref if d not in measured]


def measure_fragment(
    client: Client,
    store: RunStoreWriter,
    fragment: int,
    fp: FragmentPlan,
    ordered: list[RankedRow],
    graphs: Mapping[str, KernelGraph],
    inner: Mapping[str, list[int]],
    k: int,
    measured: dict[str, MeasurementRecord],
    deadline: float | None,
    on_event: EventSink,
) -> list[RankedRow]:
    """Time what `to_measure` names (until `deadline`, a perf_counter time), store each measurement,
    and return the ranking ordered by measured time where there is one."""
    for digest in to_measure(ordered, measured, k):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        fut = client.submit(
            measure_task,
            fp.payload,
            digest,
            dumps(graphs[digest]),
            inner[digest],
            key=f"measure-{fp.spec.name}-{digest[:16]}",
            pure=False,
            resources={"GPU": 1},
        )
        rec = fut.result()
        store.put_measurement(fragment, digest, rec)
        measured[digest] = rec
        row = next(r for r in ordered if r["digest"] == digest)
        on_event(
            {
                "event": "measured",
                "fragment": fp.spec.name,
                "digest": digest,
                "reference": row["reference"],
                "estimated_seconds": row["estimated_seconds"],
                "median_seconds": rec.get("median_seconds"),
                "device": rec.get("device"),
                "ok": rec.get("ok"),
                "error": rec.get("error"),
            }
        )
    return ranked_rows(measured_first(ordered, measured))
