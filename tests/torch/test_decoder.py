"""A Llama-style decoder block written as plain PyTorch (RMSNorm with weight and eps, q/k/v projections,
softmax attention per head, output projection and residual, RMSNorm, SiLU-gated MLP, residual),
optimized end to end on the CPU: captured, split into fragments with PyTorch glue between them,
searched under narrowed limits (and a time limit) by real Dask workers, loaded back from its store,
and compared with the model in fp16 and with torch in float64."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import mugraph
from mugraph.codegen import FP16_TOLERANCE
from tests.helpers.torch_models import SEQ, D, DecoderBlock, build, float64_output, inputs, rel_err

# Narrowed: one grid and for-loop range, no pre-defined kernel ops in the search, two input maps.
SETTINGS = {"grids": [[2, 1, 1]], "franges": [4], "kernel_ops": [], "imaps": [[-1, -1, -1], [1, -1, -1]]}


@pytest.mark.parametrize(
    "settings, seconds",
    [
        pytest.param(SETTINGS, 90, id="narrowed"),
        # the default limits: a space of hours on 2 cores, so stopped at a time limit
        pytest.param(None, 240, id="default-limits", marks=pytest.mark.slow),
    ],
)
def test_a_decoder_block_is_optimized_loaded_and_matches_the_model(
    tmp_path: Path, settings: dict[str, Any] | None, seconds: int
) -> None:
    model = build(DecoderBlock)
    x = inputs((SEQ, D))
    store = tmp_path / "decoder.zarr"
    events: list[Mapping[str, Any]] = []
    # the whole narrowed space takes about 4 minutes on 2 cores; 90 s finds μGraphs in several
    # fragments, and whatever was chosen by the time limit must compute what the model does
    module = mugraph.optimize(
        model,
        x,
        store=store,
        workers=2,
        settings=settings or {},
        budget=None if settings is None else 200,
        time_limit=seconds,
        dashboard_address=None,
        on_event=events.append,
    )
    start = next(e for e in events if e["event"] == "start")
    assert len(start["fragments"]) >= 6  # the two norms, the projections, attention, the MLP: cut at the glue
    assert any(e["event"] == "found" for e in events), "the search found no μGraph in any fragment"
    want16, want64 = model(*x), float64_output(model, x)
    for m in (module, mugraph.load(store)):
        out = m(*x)
        assert out.dtype == want16.dtype and out.shape == want16.shape
        assert rel_err(out, want16) <= FP16_TOLERANCE
        assert rel_err(out, want64) <= FP16_TOLERANCE
