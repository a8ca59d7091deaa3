"""Products the interpreter takes from whole tensors give the values the graph's tiles give.

Every block tiling of a small X·Y (each grid, imap, fmap and for-loop range that validates) is
evaluated in Z_pq with the shortcuts and without them (`products.SHORTCUTS`): bit for bit equal,
with and without a value cache; and the candidates whole searches fingerprint, and the experts of
the built-in programs with their mutants, likewise. The cases the device product must decline are
named one by one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.types import OpKind
from mugraph.programs import get_builtin
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.verify import products
from mugraph.stages.verify.algebra import Algebra, Array, Float64Algebra, ZpqAlgebra
from mugraph.stages.verify.check import ReferenceFingerprints
from mugraph.stages.verify.field import FieldSpec
from mugraph.stages.verify.interpret import evaluate
from mugraph.stages.verify.products import DeviceProduct, device_products
from mugraph.stages.verify.reuse import ValueCache
from tests.helpers.builtin import reference
from tests.helpers.mutants import experts_and_mutants

M, K, N = 6, 12, 6
MAPS = [-1, 0, 1]
Maps = tuple[int, ...]
Grid = tuple[int, int, int]
Shape = tuple[int, ...]
PLAIN = ((M, K), (K, N))
# Batched products (the IR's block matmul takes equal ranks): batches both hold, and X's broadcast
# over Y's and Y's over X's.
BATCHED = [((2, 4, 6), (2, 6, 4)), ((1, 4, 6), (2, 6, 4)), ((2, 4, 6), (1, 6, 4))]


def _in_product(d: int, rank: int, out_rank: int, kept_to: int) -> int:
    """Operand dim `d` as a dim of the output (its contraction dim to `kept_to`, for the omap)."""
    return out_rank - rank + d if d < rank - 2 else out_rank - 2 if d == rank - 2 else kept_to


def _tiling(xs: Shape, ys: Shape, grid: Grid, forloop: int, ia: Maps, fa: int, ib: Maps, fb: int) -> KernelGraph:
    g = KernelGraph()
    x_d, y_d = g.new_input(xs, name="X"), g.new_input(ys, name="Y")
    b = BlockGraph(grid=grid, forloop=forloop)
    x, y = b.new_input(x_d, ia, fmap=fa), b.new_input(y_d, ib, fmap=fb)
    acc = b.accum_no_red(b.matmul(x, y))
    rank = max(len(xs), len(ys))
    omap = []
    for a in range(3):
        if ia[a] >= 0:
            omap.append(_in_product(ia[a], len(xs), rank, rank - 2))
        elif ib[a] >= 0:  # Y's dims: its rows are the contraction, its columns the output's last
            d = ib[a]
            omap.append(rank - len(ys) + d if d < len(ys) - 2 else rank - 1)
        else:
            omap.append(-1)
    b.new_output(acc, omap)
    g.mark_output(g.customized(b)[0])
    return g


def tilings() -> Iterator[tuple[KernelGraph, tuple[Shape, Shape]]]:
    """Every block graph X·Y (X 6x12, Y 12x6) accumulated over a for-loop that validates, then
    the batched ones on two grid axes and for-loop ranges 1 and 2."""
    for grid in [(1, 1, 1), (2, 1, 1), (2, 2, 1), (3, 1, 1), (2, 3, 1)]:
        for forloop in (1, 2, 3):
            for ia, ib in itertools.product(itertools.product(MAPS, repeat=2), repeat=2):
                for fa, fb in itertools.product(MAPS, repeat=2):
                    try:
                        yield _tiling(*PLAIN, grid, forloop, (*ia, -1), fa, (*ib, -1), fb), PLAIN
                    except MugraphError:
                        continue
    for shapes in BATCHED:
        for grid, forloop in itertools.product([(2, 1, 1), (2, 2, 1)], (1, 2)):
            dims = [[-1, *range(len(s))] for s in shapes]
            fmaps = [[-1] if forloop == 1 else d for d in dims]
            for ia, ib in itertools.product(*(itertools.product(d, repeat=2) for d in dims)):
                for fa, fb in itertools.product(*fmaps):
                    try:
                        yield _tiling(*shapes, grid, forloop, (*ia, -1), fa, (*ib, -1), fb), shapes
                    except MugraphError:
                        continue


def _plain(monkeypatch: pytest.MonkeyPatch, graph: KernelGraph, alg: Algebra, inputs: list[np.ndarray]) -> list[Array]:
    with monkeypatch.context() as m:
        m.setattr(products, "SHORTCUTS", False)
        return evaluate(alg, graph, inputs)


def _taken(graph: KernelGraph, shapes: tuple[Shape, Shape]) -> dict[int, DeviceProduct]:
    (block,) = [op.block for op in graph.ops if op.block is not None]
    accum = next(op.outputs[0] for op in block.ops if op.kind is OpKind.ACCUM_NO_RED)
    return device_products(block, {accum}, shapes)


def test_every_tiling_of_a_product_gives_the_tile_by_tile_value(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = FieldSpec()
    alg = ZpqAlgebra(np, spec, spec.omegas[0])
    rng = np.random.default_rng(0)
    caches: dict[tuple[Shape, Shape], tuple[list[np.ndarray], ValueCache]] = {}
    taken = {False: 0, True: 0}
    for graph, shapes in tilings():
        if shapes not in caches:
            caches[shapes] = ([rng.integers(0, spec.m, size=s).astype(np.float64) for s in shapes], ValueCache())
        inputs, cache = caches[shapes]
        taken[len(shapes[0]) > 2] += bool(_taken(graph, shapes))
        want = _plain(monkeypatch, graph, alg, inputs)
        for got in (evaluate(alg, graph, inputs), evaluate(alg, graph, inputs, cache)):
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape and np.array_equal(g, w), graph
    # the shortcut was taken often enough to be tested, plain and batched (27 of 233 and 38 of 609
    # when written)
    assert taken[False] >= 20 and taken[True] >= 30, taken
    assert all(cache.hits > 0 for _, cache in caches.values())


def test_a_float64_tiling_agrees_within_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    alg = Float64Algebra(np)
    rng = np.random.default_rng(1)
    for graph, shapes in itertools.islice(tilings(), 0, None, 7):
        inputs = [rng.uniform(-1, 1, s) for s in shapes]
        want = _plain(monkeypatch, graph, alg, inputs)
        for g, w in zip(evaluate(alg, graph, inputs), want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def _decided(
    grid: Grid, forloop: int, ia: Maps, fa: int, ib: Maps, fb: int, shapes: Sequence[Shape] = PLAIN
) -> Grid | None:
    """The map a device product partitions X·Y by in this tiling, or None where it declines."""
    found = _taken(_tiling(shapes[0], shapes[1], grid, forloop, ia, fa, ib, fb), (shapes[0], shapes[1]))
    return next(iter(found.values())).imap if found else None


def test_the_cases_a_device_product_declines() -> None:
    # the loop walks the contraction, rows and columns split by the grid: a tile of X·Y
    assert _decided((2, 2, 1), 3, (0, -1, -1), 1, (-1, 1, -1), 0) == (0, 1, -1)
    # a grid axis splits the contraction: each block sums a part of it
    assert _decided((2, 1, 1), 1, (1, -1, -1), -1, (0, -1, -1), -1) is None
    # the loop walks X's rows and Y's columns, not the contraction
    assert _decided((1, 1, 1), 2, (-1, -1, -1), 0, (-1, -1, -1), 1) is None
    # one axis over X's rows and Y's columns: the diagonal tiles
    assert _decided((2, 1, 1), 1, (0, -1, -1), -1, (1, -1, -1), -1) is None
    batched = BATCHED[0]
    # the batches split alike in both: a batch tile of X·Y
    assert _decided((2, 2, 1), 1, (0, 1, -1), -1, (0, -1, -1), -1, batched) == (0, 1, -1)
    # the batches split in X only would pair each X batch with both of Y's: no such block graph
    with pytest.raises(MugraphError):
        _decided((2, 1, 1), 1, (0, -1, -1), -1, (-1, -1, -1), -1, batched)
    # X's batch broadcast over Y's: split in Y only
    assert _decided((2, 1, 1), 1, (-1, -1, -1), -1, (0, -1, -1), -1, BATCHED[1]) == (0, -1, -1)


def _candidates(name: str) -> list[KernelGraph]:
    """The candidates a whole search of `name`'s default space fingerprints, in order."""
    seen: list[KernelGraph] = []
    program = get_builtin(name)
    searcher = Searcher(Fragment(program.reference(), preset_config(program.preset), name))
    match = searcher.fingerprints.match

    def recording(candidate: KernelGraph) -> tuple[int, ...] | None:
        seen.append(candidate)
        return match(candidate)

    searcher.fingerprints.match = recording  # type: ignore[method-assign]
    searcher.explore((), None)
    return seen


@pytest.mark.parametrize("name", ["rms_norm", "gated_mlp"])
def test_a_search_s_candidates_fingerprint_alike_and_share_their_products(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    graphs = _candidates(name)
    assert len(graphs) >= 40
    fast = ReferenceFingerprints(reference(name), (0,))
    slow = ReferenceFingerprints(reference(name), (0,), cache_bytes=0)
    with monkeypatch.context() as m:
        m.setattr(products, "SHORTCUTS", False)
        want = [slow.fingerprint(g)[0] for g in graphs]
    alg = fast.algebras[0]
    large = 0
    exact = alg._matmul

    def counted(a: Array, b: Array) -> Array:
        nonlocal large
        large += a.shape[-2] * a.shape[-1] * b.shape[-1] >= 1 << 22
        return exact(a, b)

    alg._matmul = counted  # type: ignore[method-assign]
    for g, w in zip(graphs, want, strict=True):
        for a, b in zip(fast.fingerprint(g)[0], w, strict=True):
            assert a.shape == b.shape and np.array_equal(a, b)
    # one large product per operand pair and its variants, not one per candidate (5 of 52 and 65
    # when written; 44 and 31 tile by tile)
    assert large <= len(graphs) // 8


@pytest.mark.parametrize("name", ["lora", "gqa", "ntrans"])
def test_experts_and_mutants_fingerprint_alike_with_and_without(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    graphs = experts_and_mutants(name)
    fast = ReferenceFingerprints(reference(name), (0,))
    slow = ReferenceFingerprints(reference(name), (0,), cache_bytes=0)
    with monkeypatch.context() as m:
        m.setattr(products, "SHORTCUTS", False)
        want = [slow.fingerprint(g)[0] for g in graphs]
    for g, w in zip(graphs + graphs[::-1], want + want[::-1], strict=True):
        for a, b in zip(fast.fingerprint(g)[0], w, strict=True):
            assert a.shape == b.shape and np.array_equal(a, b)
