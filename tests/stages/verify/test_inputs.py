"""The random inputs fingerprints and float64 checks run on: their range, type and distribution, one
seed's values on every call, and fresh values for every seed, every input and the confirm stage."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from mugraph.ir.graph import KernelGraph
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.verify import draws
from mugraph.stages.verify.check import ReferenceFingerprints, field_inputs, float_inputs
from mugraph.stages.verify.confirm import Confirmer
from mugraph.stages.verify.draws import host_array, uniform_array
from mugraph.stages.verify.field import FieldSpec

SPEC = FieldSpec()


def two_weights() -> KernelGraph:
    """X W + X V: two inputs of one shape, so a value shared between them would show."""
    g = KernelGraph()
    x = g.new_input((8, 256), name="X")
    w, v = g.new_input((256, 1024), name="W"), g.new_input((256, 1024), name="V")
    g.mark_output(g.add(g.matmul(x, w), g.matmul(x, v)), "O")
    return g


def chi_square(values: np.ndarray, bins: int, m: int) -> float:
    """Pearson's statistic of `values` in [0, m) over `bins` equal ranges (m a multiple of bins)."""
    counts = np.bincount((values.ravel() // (m // bins)).astype(np.int64), minlength=bins)
    expected = values.size / bins
    return float(((counts - expected) ** 2 / expected).sum())


def uncorrelated(x: np.ndarray, y: np.ndarray) -> bool:
    """Pearson's r within 5 standard deviations (1/sqrt(n)) of 0, as for independent draws."""
    return abs(float(np.corrcoef(x.ravel(), y.ravel())[0, 1])) < 5 / float(np.sqrt(x.size))


def test_field_inputs_are_uniform_integers_below_m_in_float64() -> None:
    case = field_inputs(two_weights(), SPEC, 0, np)
    assert case.omega in SPEC.omegas
    assert [a.shape for a in case.inputs] == [(8, 256), (256, 1024), (256, 1024)]
    for a in case.inputs:
        assert a.dtype == np.float64 and a.flags.c_contiguous
        assert np.array_equal(a, np.floor(a)) and a.min() >= 0 and a.max() < SPEC.m
    w = case.inputs[1]
    assert w.min() == 0 and w.max() == SPEC.m - 1  # 262,144 draws reach both ends of 25,651 values
    # 113 equal ranges of [0, m): far below 200 for uniform draws (mean 112, sd 15), far above for
    # values confined to part of the range or piled on some of it.
    assert chi_square(w, SPEC.q, SPEC.m) < 200
    assert abs(float(w.mean()) / (SPEC.m - 1) - 0.5) < 0.005


def test_float_inputs_are_uniform_in_minus_one_to_one() -> None:
    for a in float_inputs(two_weights(), 0, np):
        assert a.dtype == np.float64 and a.min() >= -1.0 and a.max() < 1.0
    w = float_inputs(two_weights(), 0, np)[1]
    assert w.min() < -0.999 and w.max() > 0.999 and abs(float(w.mean())) < 0.01
    assert chi_square(np.floor((w + 1.0) * 5000.0), 100, 10000) < 180  # 100 ranges: mean 99, sd 14
    assert not np.array_equal(w, np.floor(w))  # not integers: a float check sees rounding


def test_a_seed_gives_the_same_values_on_every_call_and_another_seed_others() -> None:
    g = two_weights()
    a, again, other = field_inputs(g, SPEC, 5, np), field_inputs(g, SPEC, 5, np), field_inputs(g, SPEC, 6, np)
    assert a.omega == again.omega
    for x, y, z in zip(a.inputs, again.inputs, other.inputs, strict=True):
        assert np.array_equal(x, y) and not np.shares_memory(x, y)
        assert np.mean(x == z) < 0.01  # equal only by chance, once in m
    f, f_again, f_other = float_inputs(g, 5, np), float_inputs(g, 5, np), float_inputs(g, 6, np)
    for x, y, z in zip(f, f_again, f_other, strict=True):
        assert np.array_equal(x, y) and not np.any(x == z)


def test_inputs_of_one_shape_get_their_own_values() -> None:
    _, w, v = field_inputs(two_weights(), SPEC, 0, np).inputs
    assert np.mean(w == v) < 0.01 and uncorrelated(w, v)
    _, fw, fv = float_inputs(two_weights(), 0, np)
    assert not np.any(fw == fv)


def test_the_confirm_stage_draws_inputs_independent_of_the_search() -> None:
    g = two_weights()
    search = ReferenceFingerprints(g, SearchConfig().seeds)  # what a Searcher checks candidates on
    confirm = Confirmer(g, "frag")
    assert not {c.seed for c in search.cases} & {c.seed for c in confirm.fingerprints.cases}
    mine = [a for c in search.cases for a in c.inputs]
    theirs = [a for c in confirm.fingerprints.cases for a in c.inputs] + list(confirm.floats.inputs)
    for x in mine:
        for y in theirs:
            assert not np.shares_memory(x, y)
            if x.shape == y.shape:
                assert np.mean(x == y) < 0.01
                assert uncorrelated(x, y)
    seeds = [c.inputs[1] for c in confirm.fingerprints.cases]  # and each confirm seed its own
    assert all(np.mean(seeds[i] == seeds[j]) < 0.01 for i in range(3) for j in range(i))


def test_values_are_one_random_call_whatever_the_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunked fill is floor(u·m) (or u·scale + shift) of the doubles one `Generator.random`
    call would give: the spec of the values, independent of how they are written."""
    m = float(SPEC.m)
    u = np.random.default_rng(9).random((300, 70))
    for chunk in (1, 7, 1 << 10, 1 << 16):
        monkeypatch.setattr(draws, "FILL_CHUNK", chunk)
        got = uniform_array(np.random.default_rng(9), (300, 70), m, 0.0, floor=True)
        assert np.array_equal(got, np.floor(u * m))
        assert np.array_equal(uniform_array(np.random.default_rng(9), (300, 70), 2.0, -1.0), u * 2.0 - 1.0)
    assert uniform_array(np.random.default_rng(9), (), m, 0.0, floor=True).shape == ()
    assert uniform_array(np.random.default_rng(9), (0, 4), m, 0.0, floor=True).shape == (0, 4)


def test_the_largest_double_below_one_stays_below_m() -> None:
    top = np.array([np.nextafter(1.0, 0.0)])
    for m in (SPEC.m, 227, 2**14, 2**14 + 1, 94_906_265):
        assert np.floor(top * m)[0] == m - 1


def vm_flags(address: int) -> list[str]:
    """The kernel's flags of the mapping that holds `address` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_large_arrays_are_kept_off_huge_pages_and_behave_as_any_other() -> None:
    large = host_array((1024, 1024))
    assert "nh" in vm_flags(large.ctypes.data)  # MADV_NOHUGEPAGE
    g = KernelGraph()
    g.mark_output(g.exp(g.new_input((1024, 1024), name="W")), "O")
    assert "nh" in vm_flags(field_inputs(g, SPEC, 0, np).inputs[0].ctypes.data)
    assert "nh" in vm_flags(float_inputs(g, 0, np)[0].ctypes.data)
    assert large.dtype == np.float64 and large.flags.writeable and large.flags.c_contiguous
    large[:] = 3.0
    view = large[:, :8]  # a weight's tiles are views of it
    assert float(view.sum()) == 3.0 * 1024 * 8
    assert float(pickle.loads(pickle.dumps(large)).sum()) == 3.0 * 1024 * 1024
    assert host_array((4, 4)).base is None  # small ones are NumPy's own
