"""A fresh Z3 context per query must not fault its memory in again on every query."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mugraph.stages.prune import heap

# Queries in a child process whose malloc thresholds a variable froze, as Dask's nanny does; prints
# the minor page faults per query after a few to warm up.
CHILD = """
import resource, sys
import mugraph.stages.prune.z3_encoding as enc
from mugraph.stages.prune.expr import parse
from mugraph.stages.prune.oracle import OracleConfig
if sys.argv[1] == "off":
    enc.keep_context_memory = lambda: False
cfg = OracleConfig()
q = enc.SubQueries([parse("(sum 64 (* (sum 1024 (* (/ v0 (rms 1024 v0)) v1)) v2))")], 3, cfg.rlimit, cfg.mbqi)
c = parse("(sum 16 (* (sum 4 v0) (sum 512 v2)))")
for _ in range(3):
    q.check(c)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    q.check(c)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 10)
"""


def _faults_per_query(mode: str) -> float:
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


@pytest.mark.skipif(not heap.keep_context_memory(), reason="not glibc: no malloc thresholds to set")
def test_queries_reuse_the_heap_where_thresholds_were_frozen() -> None:
    # Frozen at the defaults, each context's 8 MiB blocks are mmapped and unmapped: thousands of
    # faults a query. With the thresholds set, a query faults almost nothing in.
    assert _faults_per_query("off") > 1000
    assert _faults_per_query("on") < 200
