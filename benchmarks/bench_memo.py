"""Cost of the verdict memo per key, in batches of 1000 keys, on a private embedded redis-server.

    python benchmarks/bench_memo.py [--batch 1000] [--repeat 5]

Rows: an LRU hit (LayeredMemo, no round trip), a Redis hit through LayeredMemo (one MGET; the LRU is
empty), a raw RedisMemo MGET of present and of absent keys, and a first store (one pipeline of SET NX)
raw and through LayeredMemo. Every timing is the median of `--repeat` runs on fresh keys where the
operation would otherwise hit a cache. Prints a Markdown table (µs per key).
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import statistics
import tempfile
import time
from collections.abc import Callable

import redis

from mugraph.storage.memo.layered import LayeredMemo
from mugraph.storage.memo.redis_backend import RedisMemo
from mugraph.storage.memo.redis_server import EmbeddedRedis

VALID = frozenset({b"Y", b"N", b"U"})


def make_keys(n: int, tag: str) -> list[str]:
    """Keys shaped like the real ones: schema, versions, limits, a 16-byte digest."""
    return [
        f"smt:v1:ax1:z3-4.15:rl1e6:{hashlib.blake2b(f'{tag}:{i}'.encode(), digest_size=16).hexdigest()}"
        for i in range(n)
    ]


def verdicts(names: list[str]) -> dict[str, bytes]:
    return {k: (b"Y", b"N", b"U")[i % 3] for i, k in enumerate(names)}


def median_us_per_key(setup: Callable[[int], Callable[[], object]], repeat: int, batch: int) -> tuple[float, float]:
    """Median and min over `repeat` runs of the timed callable returned by setup(run), in µs/key."""
    times = []
    for run in range(repeat):
        timed = setup(run)
        t0 = time.perf_counter()
        timed()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / batch * 1e6, min(times) / batch * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    batch, repeat = args.batch, args.repeat

    with tempfile.TemporaryDirectory(prefix="bench-memo-") as tmp, EmbeddedRedis(tmp) as server:
        raw = RedisMemo(server.url)
        version = redis.Redis.from_url(server.url, protocol=2).info("server")["redis_version"]
        raw.put_if_absent(verdicts(make_keys(batch, "warm")))  # warm the connection
        raw.get_many(make_keys(batch, "warm"))

        def lru_hit(run: int) -> Callable[[], object]:
            memo = LayeredMemo(None, valid_values=VALID)
            names = make_keys(batch, f"lru{run}")
            memo.store(verdicts(names))
            return lambda: memo.lookup(names)

        def layered_remote_hit(run: int) -> Callable[[], object]:
            names = make_keys(batch, f"remote{run}")
            raw.put_if_absent(verdicts(names))
            memo = LayeredMemo(raw, valid_values=VALID)
            return lambda: memo.lookup(names)

        def raw_mget_present(run: int) -> Callable[[], object]:
            names = make_keys(batch, f"remote{run}")  # stored by the previous row
            return lambda: raw.get_many(names)

        def raw_mget_absent(run: int) -> Callable[[], object]:
            names = make_keys(batch, f"absent{run}")
            return lambda: raw.get_many(names)

        def raw_set_nx(run: int) -> Callable[[], object]:
            items = verdicts(make_keys(batch, f"setnx{run}"))
            return lambda: raw.put_if_absent(items)

        def layered_store(run: int) -> Callable[[], object]:
            memo = LayeredMemo(raw, valid_values=VALID)
            items = verdicts(make_keys(batch, f"store{run}"))
            return lambda: memo.store(items)

        rows = [
            ("LRU hit (`LayeredMemo.lookup`, no round trip)", lru_hit),
            ("Redis hit through `LayeredMemo.lookup` (one MGET, empty LRU)", layered_remote_hit),
            ("`RedisMemo.get_many`, keys present (MGET)", raw_mget_present),
            ("`RedisMemo.get_many`, keys absent (MGET)", raw_mget_absent),
            ("`RedisMemo.put_if_absent`, new keys (pipelined SET NX)", raw_set_nx),
            ("`LayeredMemo.store`, new keys (LRU + pipelined SET NX)", layered_store),
        ]
        results = [(label, *median_us_per_key(fn, repeat, batch)) for label, fn in rows]
        raw.close()

    print(
        f"Memo cost per key, batches of {batch} keys, median of {repeat} "
        f"(redis-server {version} on a unix socket, Python {platform.python_version()}, "
        f"{platform.machine()})\n"
    )
    print("| operation | µs/key (median) | µs/key (min) |")
    print("|---|---:|---:|")
    for label, med, best in results:
        print(f"| {label} | {med:.2f} | {best:.2f} |")


if __name__ == "__main__":
    main()
