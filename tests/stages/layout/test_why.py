"""The 'why' line of `show` and the report names the terms of the model that ranked the rows: rms_norm's
best and its reference have two kernels and the same DRAM bytes, and the emitted model tells them
apart by launch and call overhead (the reference's norm is four array calls) and DRAM time."""

from __future__ import annotations

from mugraph.stages.layout.describe import explain

ROOFLINE = {"kernels": 2, "launch_seconds": 6e-6, "dram_bytes": 50_921_472, "bound": "dram", "fits": True}
BEST = ROOFLINE | {
    "emitted_launch_seconds": 6e-6,
    "emitted_dram_seconds": 21.6e-6,
    "emitted_serial_seconds": 0.4e-6,
    "emitted_spill_bytes": 0,
}
REFERENCE = ROOFLINE | {"emitted_launch_seconds": 15e-6, "emitted_dram_seconds": 23.2e-6, "emitted_serial_seconds": 0}


def test_emitted_rows_are_explained_by_the_emitted_terms() -> None:
    why = explain(BEST, REFERENCE)
    assert why.startswith("2 kernels vs 2; launch and call overhead 6.0 μs vs 15.0 μs; DRAM time 21.6 μs vs 23.2 μs")
    assert "serial time 0.4 μs vs 0.0 μs" in why and "spills" not in why


def test_rows_without_emitted_terms_keep_the_roofline_s() -> None:
    assert explain(ROOFLINE, ROOFLINE) == (
        "2 kernels vs 2 (launches 6.0 μs vs 6.0 μs); DRAM 50,921,472 B vs 50,921,472 B; bound by dram"
    )
