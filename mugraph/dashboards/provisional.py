"""A run stopped before its end (Ctrl-C, `kill`, `kill -9`) holds confirmed μGraphs and their layouts
but no ranking: the ranking is written when a run finishes or reaches its time limit. `show`, `status`
and the report rank what such a store (or a running one) holds, here, as the run's end would (the
same cost model and reference row), without a cluster and without writing anything: the answer so far."""

from __future__ import annotations

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import loads
from mugraph.stages.layout.choose import LayoutResult, choose_layouts
from mugraph.stages.layout.emitted import model_for
from mugraph.stages.layout.facts import LayoutError
from mugraph.stages.layout.profiles import GpuProfile
from mugraph.stages.layout.rank import combined, measured_first, rank
from mugraph.stages.layout.rows import RankedRow, ranked_rows
from mugraph.storage.run.paths import EXPORTED_META_KEY
from mugraph.storage.run.protocol import RunStoreReader

__all__ = ["provisional_ranking", "stored_or_provisional"]


def provisional_ranking(st: RunStoreReader, fragment: int, profile: GpuProfile) -> list[RankedRow] | None:
    """The fragment's confirmed μGraphs that have a stored layout, ranked with its reference's row;
    None where the reference has no layout under the run's strides. Confirmed μGraphs whose layout
    task had not run yet are left out (the run's end solves those)."""
    record = st.fragments()[fragment]
    reference = loads(record["graph"])
    found, layouts = st.found(fragment), st.layouts(fragment)
    io = next((dict(rec["io_layouts"]) for rec in layouts.values() if "io_layouts" in rec), {})
    candidates: dict[str, tuple[KernelGraph, LayoutResult]] = {}
    for digest, confirmation in sorted(st.confirmations(fragment).items()):
        rec = layouts.get(digest)
        if not confirmation["equivalent"] or digest not in found or rec is None or rec.get("io_layouts", {}) != io:
            continue
        try:
            candidates[digest] = (loads(found[digest].graph), LayoutResult.from_json(rec))
        except LayoutError:  # no layout fits the strides, or a record of an older schema
            continue
    try:
        ref_layout = choose_layouts(reference, io)
    except LayoutError:
        return None
    torch_run = EXPORTED_META_KEY in st.meta  # a PyTorch model's run: its ops run in PyTorch
    rows, ref_row = rank(candidates, (reference, ref_layout), profile, model_for(torch_run))
    ref_row["digest"] = canonical_digest(reference)
    return ranked_rows(measured_first(combined(rows, ref_row), st.measurements(fragment)))


def stored_or_provisional(
    st: RunStoreReader, fragment: int, profile: GpuProfile, running: bool
) -> tuple[list[RankedRow], bool]:
    """The fragment's ranking: the stored one where the run wrote it and no run is going (`running`:
    the store has a writer, `st.writer()`, read once by the caller for all fragments), else the
    provisional one (and True). A resumed run that is going holds its last invocation's ranking, of
    fewer μGraphs than it has confirmed since: the provisional one, where there is one, is newer. Empty
    where neither exists."""
    stored = st.ranking(fragment)
    if stored is not None and not running:
        return ranked_rows(stored), False
    now = provisional_ranking(st, fragment, profile)
    if now or stored is None:
        return now or [], True
    return ranked_rows(stored), False
