"""The MemoStore contract, run against every backend, and LayeredMemo on a real private redis-server."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo.layered import (
    MAX_VALUE_BYTES,
    LayeredMemo,
    LocalMemo,
    MemoStore,
    MemoUnavailable,
    open_memo_store,
)
from mugraph.storage.memo.redis_backend import RedisMemo
from mugraph.storage.memo.redis_server import EmbeddedRedis
from tests.helpers.memo import VALID, keys, verdict, wait_dead, worker_lookup, worker_store

Factory = Callable[[], MemoStore]


class MemoStoreContract:
    """What every MemoStore backend must do. Subclasses provide `make`: a factory of handles onto one
    shared, initially empty store (for Redis: new clients of one server)."""

    @pytest.fixture
    def make(self) -> Iterator[Factory]:
        raise NotImplementedError

    @pytest.fixture
    def store(self, make: Factory) -> Iterator[MemoStore]:
        handle = make()
        yield handle
        handle.close()

    def test_is_a_memo_store(self, store: MemoStore) -> None:
        assert isinstance(store, MemoStore)
        assert store.name in {"local", "redis"}

    def test_empty_batches(self, store: MemoStore) -> None:
        assert store.get_many([]) == []
        store.put_if_absent({})
        store.replace({})
        assert store.get_many([]) == []

    def test_missing_keys_are_none(self, store: MemoStore) -> None:
        assert store.get_many(["absent:1", "absent:2"]) == [None, None]

    def test_put_then_get(self, store: MemoStore) -> None:
        store.put_if_absent({"a": b"Y", "b": b"N"})
        assert store.get_many(["a", "b", "c"]) == [b"Y", b"N", None]

    def test_first_writer_wins(self, make: Factory) -> None:
        first, second = make(), make()
        first.put_if_absent({"k": b"Y", "only-first": b"N"})
        second.put_if_absent({"k": b"N", "only-second": b"U"})
        for handle in (first, second):
            assert handle.get_many(["k", "only-first", "only-second"]) == [b"Y", b"N", b"U"]
        first.close()
        second.close()

    def test_put_if_absent_is_idempotent(self, store: MemoStore) -> None:
        items = {k: verdict(k) for k in keys(50)}
        store.put_if_absent(items)
        store.put_if_absent(items)
        assert store.get_many(list(items)) == list(items.values())

    def test_replace_overwrites(self, store: MemoStore) -> None:
        store.put_if_absent({"k": b"garbage", "other": b"N"})
        store.replace({"k": b"Y"})
        assert store.get_many(["k", "other"]) == [b"Y", b"N"]

    def test_batch_order_preserved(self, store: MemoStore) -> None:
        names = keys(200)
        store.put_if_absent({k: verdict(k) for k in names[::2]})
        asked = list(reversed(names)) + names[:3] + names[:3]  # duplicates too
        expected = [verdict(k) if int(k[-6:]) % 2 == 0 else None for k in asked]
        assert store.get_many(asked) == expected

    def test_binary_safe_values_and_keys(self, store: MemoStore) -> None:
        items = {
            "nul": b"\x00",
            "crlf": b"\r\n$3\r\n*1\r\n",
            "high": bytes(range(192, 192 + MAX_VALUE_BYTES)),
            "spaces and ünïcode ∑": b"Y",
            "": b"N",
        }
        store.put_if_absent(items)
        assert store.get_many(list(items)) == list(items.values())

    def test_many_keys_in_one_batch(self, store: MemoStore) -> None:
        names = keys(10_000, "smt:many")
        items = {k: verdict(k) for k in names}
        store.put_if_absent(items)
        assert store.get_many(names) == list(items.values())
        assert store.get_many([k + ":absent" for k in names]) == [None] * len(names)

    @pytest.mark.parametrize(
        "bad",
        [{"k": "Y"}, {"k": b"x" * (MAX_VALUE_BYTES + 1)}, {"k": pickle.dumps(list(range(100)))}, {b"k": b"Y"}],
        ids=["str-value", "long-value", "pickle", "bytes-key"],
    )
    def test_rejects_non_verdict_values(self, store: MemoStore, bad: dict[str, bytes]) -> None:
        with pytest.raises(ValueError):
            store.put_if_absent(bad)
        with pytest.raises(ValueError):
            store.replace(bad)

    def test_first_claim_is_granted(self, store: MemoStore) -> None:
        assert store.claim([], 5.0) == []
        assert store.claim(["c1", "c2"], 5.0) == [True, True]

    def test_close_is_idempotent_and_keeps_what_was_written(self, make: Factory) -> None:
        """A worker's teardown may close its handle twice (plugin teardown, then process exit): the
        second close must not raise, and verdicts written before it stay visible to other handles."""
        handle = make()
        handle.put_if_absent({"closed:k": b"Y"})
        handle.close()
        handle.close()
        other = make()
        assert other.get_many(["closed:k"]) == [b"Y"]
        other.close()


class TestLocalMemo(MemoStoreContract):
    @pytest.fixture
    def make(self) -> Iterator[Factory]:
        shared = LocalMemo()
        yield lambda: shared


class TestRedisMemo(MemoStoreContract):
    @pytest.fixture
    def make(self, redis_url: str) -> Iterator[Factory]:
        yield lambda: RedisMemo(redis_url)


# -- RedisMemo specifics ------------------------------------------------------------------------------


def test_redis_claims_are_exclusive_until_their_lease_lapses(redis_url: str) -> None:
    first, second = RedisMemo(redis_url), RedisMemo(redis_url)
    assert first.claim(["q1", "q2"], 0.3) == [True, True]
    assert second.claim(["q2", "q3"], 0.3) == [False, True]
    time.sleep(0.4)
    assert second.claim(["q1"], 5.0) == [True]
    assert first.get_many(["q1", "q2", "q3"]) == [None, None, None]  # claims are not values
    client: Any = redis.Redis.from_url(redis_url, protocol=2)
    client.set("claim:q4", b"N")  # a claim key with no lease (tampered, or left by anything but a claim)
    assert first.claim(["q4"], 5.0) == [True]
    assert 0 < client.pttl("claim:q4") <= 5000
    client.close()


def test_redis_memo_unreachable_raises_memo_unavailable(tmp_path: Path) -> None:
    memo = RedisMemo(f"unix://{tmp_path}/no.sock", socket_timeout=0.5, connect_timeout=0.5)
    start = time.monotonic()
    with pytest.raises(MemoUnavailable, match="MGET"):
        memo.get_many(["k"])
    with pytest.raises(MemoUnavailable, match="SET NX"):
        memo.put_if_absent({"k": b"Y"})
    with pytest.raises(MemoUnavailable):
        memo.ping()
    assert time.monotonic() - start < 3
    # Empty batches make no round trip, so they succeed even with no server.
    assert memo.get_many([]) == []
    memo.put_if_absent({})


def test_redis_memo_pickles_by_url(redis_url: str) -> None:
    memo = RedisMemo(redis_url, socket_timeout=2.0)
    memo.put_if_absent({"k": b"Y"})
    copy = pickle.loads(pickle.dumps(memo))
    assert isinstance(copy, RedisMemo)
    assert copy.socket_timeout == 2.0
    assert copy.get_many(["k"]) == [b"Y"]
    assert copy.ping()


def test_redis_memo_hides_password() -> None:
    memo = RedisMemo("redis://user:secret@localhost:1/0")
    assert "secret" not in repr(memo)


def test_open_memo_store(redis_url: str) -> None:
    assert isinstance(open_memo_store("local"), LocalMemo)
    store = open_memo_store(redis_url)
    assert isinstance(store, RedisMemo)
    store.close()
    with pytest.raises(MugraphError, match="unsupported memo URL"):
        open_memo_store("memcached://x")


# -- LayeredMemo ----------------------------------------------------------------------------------


def _counters_consistent(memo: LayeredMemo) -> None:
    c = memo.counters
    assert c.lookups == c.local_hits + c.remote_hits + c.misses
    assert c.garbage <= c.misses


def test_layered_counts_local_and_remote_hits(redis_url: str) -> None:
    names = keys(100)
    first = LayeredMemo(RedisMemo(redis_url), valid_values=VALID)
    assert first.lookup(names) == [None] * 100
    first.store({k: verdict(k) for k in names})
    assert first.lookup(names) == [verdict(k) for k in names]
    assert first.counters.misses == 100 and first.counters.local_hits == 100
    assert first.counters.remote_hits == 0 and first.counters.stores == 100

    second = LayeredMemo(RedisMemo(redis_url), valid_values=VALID)
    assert second.lookup(names + ["new"]) == [verdict(k) for k in names] + [None]
    assert second.counters.remote_hits == 100 and second.counters.misses == 1
    assert second.lookup(names) == [verdict(k) for k in names]  # now from its LRU
    assert second.counters.local_hits == 100 and second.counters.remote_hits == 100
    assert second.counters.remote_seconds > 0
    for memo in (first, second):
        _counters_consistent(memo)
        assert set(memo.counters.as_dict()) >= {
            "lookups", "local_hits", "remote_hits", "misses", "garbage",
            "remote_errors", "remote_seconds", "stores",
        }  # fmt: skip
        memo.close()


def test_layered_duplicate_keys_in_one_batch() -> None:
    backend = LocalMemo()
    backend.put_if_absent({"a": b"Y"})
    memo = LayeredMemo(backend, valid_values=VALID)
    assert memo.lookup(["a", "b", "a", "b"]) == [b"Y", None, b"Y", None]
    assert memo.counters.remote_hits == 2 and memo.counters.misses == 2
    _counters_consistent(memo)


def test_layered_lru_evicts_least_recently_used() -> None:
    memo = LayeredMemo(None, valid_values=VALID, max_entries=3)
    memo.store({"a": b"Y", "b": b"N", "c": b"U"})
    assert memo.lookup(["a"]) == [b"Y"]  # a is now the most recent
    memo.store({"d": b"Y"})  # evicts b
    assert len(memo) == 3
    assert memo.lookup(["a", "b", "c", "d"]) == [b"Y", None, b"U", b"Y"]
    memo.store({k: b"N" for k in keys(10)})
    assert len(memo) == 3
    assert memo.name == "lru"


def test_layered_evicted_entries_come_back_from_the_backend(redis_url: str) -> None:
    memo = LayeredMemo(RedisMemo(redis_url), valid_values=VALID, max_entries=10)
    names = keys(30)
    memo.store({k: verdict(k) for k in names})
    assert len(memo) == 10
    assert memo.lookup(names) == [verdict(k) for k in names]
    assert memo.counters.remote_hits == 20 and memo.counters.local_hits == 10
    memo.close()


def test_layered_rejects_invalid_values_on_store() -> None:
    memo = LayeredMemo(LocalMemo(), valid_values=VALID)
    with pytest.raises(ValueError, match="not one of"):
        memo.store({"k": b"maybe"})
    with pytest.raises(ValueError):
        LayeredMemo(None, valid_values=frozenset())


def test_layered_garbage_is_ignored_counted_warned_and_repaired(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, protocol=2)
    client.set("smt:bad", pickle.dumps({"evil": True}))
    client.set("smt:bad2", b"maybe")
    client.set("smt:good", b"Y")
    memo = LayeredMemo(RedisMemo(redis_url), valid_values=VALID)
    with pytest.warns(
        RuntimeWarning, match=r"rejected 2 memo values so far .*e\.g\. key 'smt:bad' = b'\\x80\\x04.*'; "
    ):
        assert memo.lookup(["smt:bad", "smt:good", "smt:bad2"]) == [None, b"Y", None]
    assert memo.counters.garbage == 2 and memo.counters.misses == 2 and memo.counters.remote_hits == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per LayeredMemo
        assert memo.lookup(["smt:bad"]) == [None]
    assert memo.counters.garbage == 3
    # The caller recomputes and stores: the garbage is overwritten (not kept by SET NX).
    memo.store({"smt:bad": b"N", "smt:bad2": b"U", "smt:new": b"Y"})
    assert memo.counters.repaired == 2
    assert client.mget(["smt:bad", "smt:bad2", "smt:new"]) == [b"N", b"U", b"Y"]
    fresh = LayeredMemo(RedisMemo(redis_url), valid_values=VALID)
    assert fresh.lookup(["smt:bad", "smt:bad2"]) == [b"N", b"U"]
    assert fresh.counters.garbage == 0 and fresh.counters.remote_hits == 2
    _counters_consistent(memo)
    for m in (memo, fresh):
        m.close()
    client.close()


def test_layered_store_of_a_valid_key_never_overwrites(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, protocol=2)
    client.set("k", b"Y")
    memo = LayeredMemo(RedisMemo(redis_url), valid_values=VALID)
    memo.store({"k": b"N"})  # first writer wins
    assert client.get("k") == b"Y"
    memo.close()
    client.close()


def test_layered_local_only_values_stay_in_the_process() -> None:
    backend = LocalMemo()
    memo = LayeredMemo(backend, valid_values=VALID, local_only_values=frozenset({b"U"}))
    memo.store({"timeout": b"U", "sat": b"Y"})
    assert backend.get_many(["timeout", "sat"]) == [None, b"Y"]
    assert memo.lookup(["timeout", "sat"]) == [b"U", b"Y"]
    with pytest.raises(ValueError, match="subset"):
        LayeredMemo(backend, valid_values=VALID, local_only_values=frozenset({b"T"}))


def _run_sequence(memo: LayeredMemo, on_batch: Callable[[int], None]) -> list[list[bytes | None]]:
    """Overlapping batches: look up, 'solve' the misses, store them. Returns every lookup's answer."""
    answers = []
    for i in range(12):
        on_batch(i)
        batch = keys(300)[i * 20 : i * 20 + 60]
        found = memo.lookup(batch)
        answers.append(found)
        memo.store({k: verdict(k) for k, v in zip(batch, found, strict=True) if v is None})
    return answers


def test_layered_survives_redis_killed_mid_sequence(own_redis: EmbeddedRedis) -> None:
    expected = _run_sequence(LayeredMemo(LocalMemo(), valid_values=VALID), lambda i: None)
    memo = LayeredMemo(RedisMemo(own_redis.url, socket_timeout=1, connect_timeout=1), valid_values=VALID)

    def kill_at_five(i: int) -> None:
        if i == 5:
            os.kill(own_redis.pid, signal.SIGKILL)
            assert wait_dead(own_redis.pid)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answers = _run_sequence(memo, kill_at_five)
    unavailable = [w for w in caught if "memo server unavailable" in str(w.message)]
    assert len(unavailable) == 1, [str(w.message) for w in caught]
    assert "continuing with the local memo" in str(unavailable[0].message)
    assert answers == expected
    assert memo.counters.remote_errors >= 1
    assert memo.backend is None
    _counters_consistent(memo)


def test_layered_two_worker_processes_share_one_redis(redis_url: str) -> None:
    names = keys(500, "smt:shared")
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool_a:
        pid_a, counters_a = pool_a.submit(worker_store, redis_url, names).result(timeout=60)
    with ProcessPoolExecutor(1, mp_context=ctx) as pool_b:
        pid_b, found, counters_b = pool_b.submit(worker_lookup, redis_url, names).result(timeout=60)
    assert len({pid_a, pid_b, os.getpid()}) == 3
    assert counters_a["misses"] == 500 and counters_a["stores"] == 500
    assert found == [verdict(k) for k in names]
    assert counters_b["remote_hits"] == 500 and counters_b["misses"] == 0


def test_layered_memo_survives_a_restart_from_the_aof(tmp_path: Path) -> None:
    names = keys(1000, "smt:aof")
    with EmbeddedRedis(tmp_path / "memo") as server:
        memo = LayeredMemo(RedisMemo(server.url), valid_values=VALID)
        memo.store({k: verdict(k) for k in names})
        memo.close()
    # stop() sent SHUTDOWN, which flushes the AOF; a new server on the same directory reloads it.
    with EmbeddedRedis(tmp_path / "memo") as server:
        memo = LayeredMemo(RedisMemo(server.url), valid_values=VALID)
        assert memo.lookup(names) == [verdict(k) for k in names]
        assert memo.counters.remote_hits == 1000 and memo.counters.misses == 0
        memo.close()


def test_layered_is_thread_safe() -> None:
    memo = LayeredMemo(LocalMemo(), valid_values=VALID, max_entries=500)
    names = keys(2000)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(0, 2000, 50):
                batch = names[(i + offset) % 2000 :][:50]
                found = memo.lookup(batch)
                assert all(v is None or v == verdict(k) for k, v in zip(batch, found, strict=True))
                memo.store({k: verdict(k) for k, v in zip(batch, found, strict=True) if v is None})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(o,)) for o in (0, 100, 700, 1300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(memo) <= 500
    _counters_consistent(memo)
