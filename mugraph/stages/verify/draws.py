"""The random arrays fingerprints and float64 checks run on, drawn cheaply: a worker holds one seed's
inputs for its search, the confirming worker four more for the confirm stage (three fingerprint seeds
and a float64 one), all at the fragment's full shapes (five float64 copies of rms_norm's 4096x6144
weight, 1 GB), and drawing them was most of its first seconds.

Two costs, each measured in a fresh worker: the draw itself, and the first touch of the memory it
fills. An int32 draw and its float64 copy read and wrote 1.5x the memory the array needs, twice
more; `uniform_array` fills the one array the interpreter reads, chunk by chunk, in cache. And
NumPy advises transparent huge pages for large arrays; on this project's VMs the first touch of a
fresh 2 MB huge page costs about 4 ms (the host backs it then): 1 GB of arrays kept alive took
1.3-2.5 s of CPU with the advice, 0.45 s without. `host_array` advises against them: the fill is
sequential and BLAS streams the weights, and candidate fingerprints took as long either way
(rms_norm's search: 97 fingerprints in 5.9-7.0 s). Where memory is backed up front (bare metal),
huge pages would fault faster: 4 KiB faults cost there some 0.1 s per GB more (estimated, not measured).
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Sequence

import numpy as np

FILL_CHUNK = 1 << 16  # elements: 512 KiB of float64, scaled and floored while still in cache
NO_HUGE_PAGES_FROM = 4 << 20  # bytes: where NumPy starts advising huge pages


def uniform_array(
    rng: np.random.Generator, shape: Sequence[int], scale: float, shift: float, *, floor: bool = False
) -> np.ndarray:
    """A float64 array of `shape` with `rng`'s uniform doubles u in [0, 1) made into u·scale + shift,
    or floor(u·scale) + shift, filled in place chunk by chunk. The values are those of one
    `rng.random(shape)` call, whatever the chunk size.

    floor(u·m) for an integer m is uniform on [0, m) within a negligible bias. u is k/2**53 for k
    uniform in [0, 2**53), and u·m steps by m/2**53 (2.8e-12 for m = 227·113): each integer j is
    hit by 2**53/m of the k, rounded up or down, and rounding u·m to float64 (half an ulp, below
    the step) moves at most one k across each boundary, so P(j) = 1/m within a relative 3m/2**53
    (8.5e-12). u·m < m: u <= 1 - 2**-53, and m·2**-53 is exact below a power-of-two m and more than
    half the float64 spacing below any other, so the product rounds below m.
    2u - 1 is exact, in [-1, 1)."""
    out = host_array(tuple(shape))
    flat = out.reshape(-1)
    for start in range(0, flat.size, FILL_CHUNK):
        part = flat[start : start + FILL_CHUNK]
        rng.random(out=part)
        part *= scale
        if floor:
            np.floor(part, out=part)
        if shift:
            part += shift
    return out


def host_array(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float64 array; a large one in memory advised against transparent huge
    pages (an anonymous private mapping, unmapped when the array goes)."""
    nbytes = math.prod(shape) * 8
    if nbytes < NO_HUGE_PAGES_FROM or not hasattr(mmap, "MADV_NOHUGEPAGE"):
        return np.empty(shape, dtype=np.float64)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
    buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=np.float64).reshape(shape)
