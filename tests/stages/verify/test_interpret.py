"""The block-graph simulator's data movement: imap/fmap partitioning, omap assembly, accumulators."""

from __future__ import annotations

import numpy as np
import pytest

from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.stages.verify import block_graphs
from mugraph.stages.verify.algebra import Float64Algebra, ZpqAlgebra, merges
from mugraph.stages.verify.check import field_inputs, match_outputs
from mugraph.stages.verify.field import FieldSpec
from mugraph.stages.verify.interpret import evaluate
from mugraph.stages.verify.tiles import assemble, partition
from tests.helpers.builtin import EXPERTS, PROGRAMS

ALG = Float64Algebra(np)


@pytest.mark.parametrize(
    ("shape", "grid", "imap"),
    [((8, 12), (2, 3, 1), (0, 1, -1)), ((4, 6, 8), (2, 1, 4), (0, -1, 2)), ((6, 4), (1, 2, 3), (-1, 1, 0))],
)
def test_partition_then_assemble_is_identity(
    shape: tuple[int, ...], grid: tuple[int, int, int], imap: tuple[int, int, int]
) -> None:
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    bg = BlockGraph(grid=grid)
    tiles = partition(ALG, x, bg, imap, -1)
    assert tiles.shape[:3] == grid
    np.testing.assert_array_equal(assemble(ALG, tiles, bg, imap), x)


def test_partition_takes_grid_chunk_then_iteration_piece() -> None:
    x = np.arange(16, dtype=np.float64).reshape(1, 16)
    bg = BlockGraph(grid=(2, 1, 1), forloop=4)
    tiles = partition(ALG, x, bg, (1, -1, -1), 1)  # (gx, gy, gz, F, 1, 2)
    assert tiles.shape == (2, 1, 1, 4, 1, 2)
    np.testing.assert_array_equal(tiles[1, 0, 0, 2], [[12, 13]])  # block 1 owns 8..15, piece 2


def _one_block_program(accum: str, forloop: int, rdx: int = 4) -> KernelGraph:
    g = KernelGraph()
    x_d = g.new_input((2, 32), name="X")
    b = BlockGraph(grid=(2, 1, 1), forloop=forloop, rdx=rdx)
    x = b.new_input(x_d, (0, -1, -1), fmap=1)
    b.new_output(b.forloop_accum(x, accum), (0, -1, -1))
    g.mark_output(g.customized(b)[0])
    return g


@pytest.fixture(params=["at once", "by iteration"])
def loop_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of running a for-loop: every iteration at once, or one after another."""
    if request.param == "by iteration":
        monkeypatch.setattr(block_graphs, "LOOP_AT_ONCE_BYTES", -1)
    return str(request.param)


@pytest.mark.parametrize("accum", ["accum_no_red", "accum_sum", "accum_mean", "accum_rms", "accum_redtox"])
def test_accumulators(accum: str, loop_mode: str) -> None:
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32))
    (out,) = evaluate(ALG, _one_block_program(accum, forloop=4), [x])
    pieces = x.reshape(2, 4, 8)  # row, iteration, last dim
    want = {
        "accum_no_red": pieces.sum(axis=1),
        "accum_sum": x.sum(axis=1, keepdims=True),
        "accum_mean": x.mean(axis=1, keepdims=True),
        "accum_rms": np.sqrt((x * x).mean(axis=1, keepdims=True)),
        # strided fold: out[j] = sum over t and k of x_t[k*rdx + j]
        "accum_redtox": pieces.reshape(2, 4, 2, 4).sum(axis=(1, 2)),
    }[accum]
    np.testing.assert_allclose(out, want, rtol=1e-12)


def test_ops_after_accumulation_run_once(loop_mode: str) -> None:
    g = KernelGraph()
    x_d = g.new_input((1, 8), name="X")
    b = BlockGraph(grid=(1, 1, 1), forloop=4)
    x = b.new_input(x_d, (-1, -1, -1), fmap=1)
    acc = b.accum_no_red(x)
    b.new_output(b.mul_scalar(acc, 3.0), (-1, -1, -1))  # 3 * sum, not 3**4 * ...
    g.mark_output(g.customized(b)[0])
    data = np.arange(8, dtype=np.float64).reshape(1, 8)
    (out,) = evaluate(ALG, g, [data])
    np.testing.assert_allclose(out, 3 * data.reshape(1, 4, 2).sum(axis=1))


def test_match_outputs_finds_the_permutation() -> None:
    a, b, c = np.zeros((2, 2)), np.ones((2, 2)), np.ones((2, 3))
    assert match_outputs([[b, a]], [[a, b]], np) == (1, 0)
    assert match_outputs([[a, b]], [[a, b]], np) == (0, 1)
    assert match_outputs([[a, a]], [[a, b]], np) is None
    assert match_outputs([[a, c]], [[a, b]], np) is None  # shapes differ
    assert match_outputs([[a]], [[a, b]], np) is None
    # every seed must agree on one permutation
    assert match_outputs([[a, b], [b, a]], [[a, b], [a, b]], np) is None


@pytest.mark.parametrize(("name", "label"), EXPERTS)
def test_loop_at_once_equals_loop_by_iteration(name: str, label: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every expert's for-loops (matmuls of tiles accumulated, merged into one product; other
    accumulators; values that do not vary with the iteration, which still add up F times) give the
    same Z_pq values whichever way the loop runs."""
    graph = PROGRAMS[name].experts[label]()
    spec = FieldSpec()
    case = field_inputs(graph, spec, 7, np)
    alg = ZpqAlgebra(np, spec, case.omega)
    at_once = evaluate(alg, graph, list(case.inputs))
    monkeypatch.setattr(block_graphs, "LOOP_AT_ONCE_BYTES", -1)
    by_iteration = evaluate(alg, graph, list(case.inputs))
    assert all(np.array_equal(a, b) for a, b in zip(at_once, by_iteration, strict=True))


def test_a_value_fixed_across_iterations_adds_up_once_per_iteration(loop_mode: str) -> None:
    g = KernelGraph()
    x_d = g.new_input((2, 8), name="X")
    w_d = g.new_input((8, 4), name="W")
    b = BlockGraph(grid=(1, 1, 1), forloop=4)
    x = b.new_input(x_d, (-1, -1, -1), fmap=-1)  # the whole X in every iteration
    w = b.new_input(w_d, (-1, -1, -1), fmap=-1)
    b.new_output(b.accum_no_red(b.matmul(x, w)), (-1, -1, -1))
    g.mark_output(g.customized(b)[0])
    rng = np.random.default_rng(1)
    xs, ws = rng.uniform(-1, 1, (2, 8)), rng.uniform(-1, 1, (8, 4))
    (out,) = evaluate(ALG, g, [xs, ws])
    np.testing.assert_allclose(out, 4 * xs @ ws, rtol=1e-12)


def test_a_loop_whose_merge_would_copy_gives_the_values_of_its_iterations(monkeypatch: pytest.MonkeyPatch) -> None:
    """A weight split by the grid along its rows and walked by the loop along its columns cannot be
    merged into one contraction without a copy (gated_mlp's candidates: 134 MB of W each); the
    iterations' products are then batched and added up. The same Z_pq values either way."""
    g = KernelGraph()
    x_d, w_d = g.new_input((8, 64), name="X"), g.new_input((64, 64), name="W")
    b = BlockGraph(grid=(4, 1, 1), forloop=4)
    x = b.new_input(x_d, (-1, -1, -1), fmap=1)  # (8, 16) per iteration
    w = b.new_input(w_d, (0, -1, -1), fmap=1)  # rows by the grid, columns by the loop: (16, 16)
    b.new_output(b.accum_no_red(b.matmul(x, w)), (1, -1, -1))
    g.mark_output(g.customized(b)[0])
    spec = FieldSpec()
    case = field_inputs(g, spec, 3, np)
    alg = ZpqAlgebra(np, spec, case.omega)
    view = partition(alg, case.inputs[1], b, (0, -1, -1), 1)  # (4, 1, 1, F, 16, 16)
    assert not merges(view, [3, 4])  # the case this test is about
    at_once = evaluate(alg, g, list(case.inputs))
    monkeypatch.setattr(block_graphs, "LOOP_AT_ONCE_BYTES", -1)
    by_iteration = evaluate(alg, g, list(case.inputs))
    assert all(np.array_equal(p, q) for p, q in zip(at_once, by_iteration, strict=True))
