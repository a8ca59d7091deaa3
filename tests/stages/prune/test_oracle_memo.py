"""The oracle on a real Redis memo: sharing across processes, a server dying, garbage in Redis."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from mugraph.stages.prune.expr import Expr, output_exprs
from mugraph.stages.prune.models import Refuter
from mugraph.stages.prune.oracle import VERDICT_BYTES, OracleConfig, SubexprOracle, Verdict
from mugraph.storage.memo.layered import LayeredMemo, open_memo_store
from mugraph.storage.memo.redis_backend import RedisMemo
from mugraph.storage.memo.redis_server import EmbeddedRedis
from tests.helpers.builtin import reference
from tests.helpers.verdict_tables import GATED_MLP, LORA

QUERIES = {"lora": [e.sexpr for _, e, _ in LORA], "gated_mlp": [e.sexpr for _, e, _ in GATED_MLP]}


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(tmp_path / "memo") as server:
        yield server


def layered(url: str) -> LayeredMemo:
    return LayeredMemo(open_memo_store(url), valid_values=VERDICT_BYTES)


def oracle(name: str, memo: LayeredMemo | None) -> SubexprOracle:
    ref = reference(name)
    return SubexprOracle(output_exprs(ref), len(ref.input_tensors), OracleConfig(engine="z3"), memo)


def _exprs(name: str) -> list[Expr]:
    table = {"lora": LORA, "gated_mlp": GATED_MLP}[name]
    return [e for _, e, _ in table]


def needs_solver(name: str) -> int:
    """Distinct queries the model prefilters leave to the memo and Z3."""
    refuter = Refuter(oracle(name, None).finals)
    return len({e for e in _exprs(name) if not refuter.refutes(e)})


def worker(url: str, name: str) -> tuple[list[str], int, int]:
    """Run in a fresh (spawned) process: verdicts, solver calls, remote memo hits."""
    memo = layered(url)
    o = oracle(name, memo)
    verdicts = o.verdicts(_exprs(name))
    return [v.value for v in verdicts], o.counters.solver_calls, memo.counters.remote_hits


def test_second_worker_process_makes_no_solver_calls(redis: EmbeddedRedis) -> None:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as first:
        v1, calls1, hits1 = first.apply(worker, (redis.url, "lora"))
    with ctx.Pool(1) as second:
        v2, calls2, hits2 = second.apply(worker, (redis.url, "lora"))
    assert calls1 == needs_solver("lora") and hits1 == 0
    assert calls2 == 0 and hits2 == calls1
    assert v1 == v2


def racing_worker(url: str, name: str, barrier: Any) -> tuple[list[str], int, int]:
    """Like `worker`, but starts its batch together with the others: verdicts, solver calls,
    verdicts waited for."""
    memo = layered(url)
    o = oracle(name, memo)
    exprs = _exprs(name)
    barrier.wait()
    verdicts = o.verdicts(exprs)
    return [v.value for v in verdicts], o.counters.solver_calls, o.counters.claim_waits


def test_workers_meeting_the_same_queries_at_once_solve_each_once(redis: EmbeddedRedis) -> None:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        barrier = manager.Barrier(2)
        results = pool.starmap(racing_worker, [(redis.url, "gated_mlp", barrier)] * 2)
    (v1, calls1, waits1), (v2, calls2, waits2) = results
    need = needs_solver("gated_mlp")
    assert v1 == v2 == [v.value for v in oracle("gated_mlp", None).verdicts(_exprs("gated_mlp"))]
    assert calls1 + calls2 == need  # each query solved by one of them
    assert waits1 + waits2 == need  # and waited for by the other


def test_a_lapsed_claim_is_taken_over(redis: EmbeddedRedis) -> None:
    """A worker that claimed a query and died holds it only for its lease."""
    exprs = _exprs("lora")
    o = oracle("lora", layered(redis.url))
    dead = RedisMemo(redis.url)
    assert all(dead.claim([o.key(e) for e in exprs], 0.3))
    assert dead.claim([o.key(exprs[0])], 0.3) == [False]  # held
    t0 = time.monotonic()
    verdicts = o.verdicts(exprs)
    assert 0.25 < time.monotonic() - t0 < 5
    assert verdicts == oracle("lora", None).verdicts(exprs)
    assert o.counters.solver_calls == needs_solver("lora") and o.counters.claim_waits == 0


class KillAfterLookup(RedisMemo):
    """The real Redis backend, whose server is killed between a batch's lookup and its store."""

    def __init__(self, url: str, pid: int) -> None:
        super().__init__(url, socket_timeout=1.0, connect_timeout=1.0)
        self.pid = pid

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        found = super().get_many(keys)
        os.kill(self.pid, signal.SIGKILL)
        return found


def test_redis_killed_in_the_middle_of_a_batch(redis: EmbeddedRedis) -> None:
    expected = oracle("gated_mlp", None).verdicts(_exprs("gated_mlp"))
    memo = LayeredMemo(KillAfterLookup(redis.url, redis.pid), valid_values=VERDICT_BYTES)
    o = oracle("gated_mlp", memo)
    exprs = _exprs("gated_mlp")
    with pytest.warns(RuntimeWarning, match="memo server unavailable"):
        first = o.verdicts(exprs[:6])
    rest = o.verdicts(exprs[6:])  # no second warning, no exception
    again = oracle("gated_mlp", memo).verdicts(exprs)  # a fresh oracle: now from the memo's local level
    assert first + rest == expected and again == expected
    assert memo.counters.remote_errors >= 1 and memo.backend is None
    assert memo.counters.local_hits >= len(set(exprs[:6]))


def test_garbage_in_redis_is_ignored_reported_and_repaired(redis: EmbeddedRedis) -> None:
    planted = oracle("lora", None)
    e = LORA[0][1]
    raw = RedisMemo(redis.url)
    raw.replace({planted.key(e): b"\x80\x04pickle?"})
    memo = layered(redis.url)
    o = oracle("lora", memo)
    with pytest.warns(RuntimeWarning, match="rejected 1 memo value so far"):
        assert o.verdicts([e]) == [Verdict.YES]
    assert o.counters.solver_calls == 1 and memo.counters.garbage == 1
    assert raw.get_many([planted.key(e)]) == [b"Y"]  # overwritten with the recomputed verdict


def test_memo_survives_a_redis_restart(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "memo") as server:
        first = oracle("lora", layered(server.url))
        v1 = first.verdicts(_exprs("lora"))
    with EmbeddedRedis(tmp_path / "memo") as server:
        second = oracle("lora", layered(server.url))
        assert second.verdicts(_exprs("lora")) == v1
        assert second.counters.solver_calls == 0
