"""Reusing shared tensor values between fingerprints changes no fingerprint.

Each expert and its mutants (which share most of their structure with it and with each other,
differing in one map, accumulator or operand order) are fingerprinted twice: through one warm
cache, in sequence, and each alone without a cache. Every output must be equal bit for bit,
and the cache must have been used.
"""

from __future__ import annotations

import numpy as np
import pytest

from mugraph.ir.errors import MugraphError
from mugraph.ir.serialize import from_json
from mugraph.stages.verify.algebra import ZpqAlgebra
from mugraph.stages.verify.check import ReferenceFingerprints
from mugraph.stages.verify.field import FieldSpec
from mugraph.stages.verify.interpret import evaluate
from mugraph.stages.verify.reuse import ValueCache
from tests.helpers.builtin import PROGRAMS, reference
from tests.helpers.mutants import experts_and_mutants, mutants


@pytest.mark.parametrize("name", ["lora", "gqa", "ntrans"])
def test_warm_cache_gives_the_same_fingerprints(name: str) -> None:
    cached = ReferenceFingerprints(reference(name), (0,))
    plain = ReferenceFingerprints(reference(name), (0,), cache_bytes=0)
    graphs = experts_and_mutants(name)
    for g in graphs + graphs[::-1]:
        for warm, cold in zip(cached.fingerprint(g)[0], plain.fingerprint(g)[0], strict=True):
            assert warm.shape == cold.shape and np.array_equal(warm, cold)
    cache = cached.caches[0]
    assert cache.hits > len(graphs)  # the second pass alone reuses every block output
    assert plain.caches[0].hits == 0 and plain.caches[0].nbytes == 0


def test_cache_keeps_to_its_budget() -> None:
    name = "lora"
    spec = FieldSpec()
    ref = reference(name)
    fp = ReferenceFingerprints(ref, (0,))
    alg = ZpqAlgebra(np, spec, fp.cases[0].omega)
    expert = next(iter(PROGRAMS[name].experts.values()))()
    evaluate(alg, expert, fp.cases[0].inputs, small := ValueCache(max_bytes=1_200_000))
    for _, _, data in list(mutants(expert))[:30]:
        try:
            g = from_json(data)
        except MugraphError:
            continue
        evaluate(alg, g, fp.cases[0].inputs, small)
        assert small.nbytes <= small.max_bytes
    assert small.nbytes > 0


def test_float_reference_with_a_warm_cache_gives_the_same_errors() -> None:
    """The confirm stage's float64 check reuses values between μGraphs; each error must equal the
    one computed alone."""
    from mugraph.stages.verify.check import FloatReference, float_max_rel_err

    name = "lora"
    floats = FloatReference(reference(name), np, cache_bytes=64 << 20)
    expert = next(iter(PROGRAMS[name].experts.values()))()
    graphs = [expert]
    for _, _, data in list(mutants(expert))[:25]:
        try:
            graphs.append(from_json(data))
        except MugraphError:
            continue
    for g in graphs + graphs[::-1]:
        if [t.shape for t in g.output_tensors] != [t.shape for t in reference(name).output_tensors]:
            continue
        assert floats.max_rel_err(g, (0,)) == float_max_rel_err(reference(name), g, (0,), np)
    assert floats.cache is not None and floats.cache.hits > 0
