"""The fingerprint probe: block (0, 0, 0) of a candidate's last block graph, run alone, gives
exactly the corner of each output that the whole evaluation gives, and rejecting on corners never
changes a verdict. Checked on every expert and every valid mutant of the built-in programs."""

from __future__ import annotations

import pytest

from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.stages.verify.check import ReferenceFingerprints, match_outputs
from mugraph.stages.verify.interpret import evaluate, probe_outputs
from tests.helpers.builtin import EXPERTS, reference_fingerprints
from tests.helpers.mutants import experts_and_mutants

# gqa's 38 graphs at full size are 18 s of the default suite; its verdicts are still checked below
PROGRAM_PARAMS = [
    pytest.param(n, marks=[pytest.mark.slow] if n == "gqa" else []) for n in sorted({n for n, _ in EXPERTS})
]


@pytest.mark.parametrize("name", PROGRAM_PARAMS)
def test_probe_tiles_are_the_corners_of_the_outputs(name: str) -> None:
    fp = reference_fingerprints(name, (0,))
    alg, inputs = fp.algebras[0], fp.cases[0].inputs
    graphs = experts_and_mutants(name)
    probed = 0
    for graph in graphs:
        tiles = probe_outputs(alg, graph, inputs)
        if tiles is None:
            continue
        probed += 1
        whole = evaluate(alg, graph, inputs)
        assert len(tiles) == len(whole)
        for tile, out in zip(tiles, whole, strict=True):
            corner = out[tuple(slice(0, n) for n in tile.shape)]
            assert tile.shape == corner.shape
            assert (tile == corner).all(), f"{name}: the probe's tile is not the output's corner"
    assert probed >= len(graphs) // 2, (probed, len(graphs))


def test_rejecting_on_corners_keeps_every_verdict() -> None:
    """`match` (probe first) agrees with matching the whole fingerprints, on graphs the probe
    rejects and on graphs whose corners agree while the rest differs (which must fall through
    to the whole evaluation and fail there)."""
    rejected = fell_through = 0
    for name in sorted({n for n, _ in EXPERTS}):
        fp = reference_fingerprints(name, (0,))
        for graph in experts_and_mutants(name):
            whole = match_outputs(fp.fingerprint(graph), fp.outputs, fp.xp)
            assert fp.match(graph) == whole, f"{name}: the probe changed a verdict"
            differs = fp.probe_differs(graph)
            assert not (differs and whole is not None), f"{name}: the probe rejects an equal graph"
            rejected += differs
            fell_through += whole is None and not differs
    assert rejected > 20, rejected
    assert fell_through == 0, "no mutant has the reference's corner: the case below covers it"


def _tiled_matmul(omap: tuple[int, int, int]) -> KernelGraph:
    """X·W on a 2x2 grid (X's rows along y, W's columns along x), assembled by `omap`."""
    g = KernelGraph()
    x, w = g.new_input((16, 16), name="X"), g.new_input((16, 16), name="W")
    b = BlockGraph(grid=(2, 2, 1), forloop=1)
    xt, wt = b.new_input(x, (-1, 0, -1)), b.new_input(w, (1, -1, -1))
    b.new_output(b.accum_no_red(b.matmul(xt, wt)), omap)
    g.mark_output(g.customized(b)[0], "O")
    return g


def test_equal_corners_fall_through_to_the_whole_grid() -> None:
    """Blocks placed transposed (grid x along rows, y along columns): block (0, 0) lands where it
    should, blocks (1, 0) and (0, 1) are swapped. The probe cannot tell; the whole grid does."""
    right, swapped = _tiled_matmul((1, 0, -1)), _tiled_matmul((0, 1, -1))
    g = KernelGraph()
    x, w = g.new_input((16, 16), name="X"), g.new_input((16, 16), name="W")
    g.mark_output(g.matmul(x, w), "O")
    fp = ReferenceFingerprints(g, (0,))
    assert fp.match(right) == (0,)
    assert not fp.probe_differs(swapped)
    assert fp.match(swapped) is None
