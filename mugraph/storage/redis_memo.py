"""The Redis backend of the verdict memo: one MGET per lookup batch, one pipeline of SET NX per store.

Values are short verdict bytes (see `mugraph.storage.memo.check_items`), never pickles. Every Redis
error (connection refused, timeout, a server that refuses writes) becomes `MemoUnavailable`: the memo is
a cache, and `LayeredMemo` carries on without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from mugraph.storage.memo import MemoStore, MemoUnavailable, check_items

__all__ = ["RedisMemo"]

_ERRORS = (redis.exceptions.RedisError, OSError)


def _describe(url: str) -> str:
    """The URL without a password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return url


class RedisMemo(MemoStore):
    """A `MemoStore` on a Redis server named by a URL (`redis://host:port/db`, `unix:///path/to/sock`).

    Timeouts are explicit (redis-py's defaults changed across versions); `retries` reconnection attempts
    with a short backoff are made before a call fails, so a dead server costs well under a second."""

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        socket_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        retries: int = 1,
    ) -> None:
        self.url = url
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self._client: Any = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            protocol=2,
            decode_responses=False,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), retries),
        )

    def __repr__(self) -> str:
        return f"RedisMemo({_describe(self.url)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A client holds sockets; a copy in another process reconnects from the URL.
        return (
            _rebuild,
            (self.url, self.socket_timeout, self.connect_timeout, self.retries),
        )

    def _unavailable(self, what: str, exc: BaseException) -> MemoUnavailable:
        return MemoUnavailable(f"{what} on {_describe(self.url)} failed: {type(exc).__name__}: {exc}")

    def ping(self) -> bool:
        """True when the server answers; raises MemoUnavailable when it cannot be reached."""
        try:
            return bool(self._client.ping())
        except _ERRORS as exc:
            raise self._unavailable("PING", exc) from exc

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        try:
            values: list[bytes | None] = self._client.mget(list(keys))
        except _ERRORS as exc:
            raise self._unavailable(f"MGET of {len(keys)} keys", exc) from exc
        return values

    def _set_batch(self, items: Mapping[str, bytes], *, nx: bool) -> None:
        if not items:
            return
        check_items(items)
        try:
            pipe = self._client.pipeline(transaction=False)
            for key, value in items.items():
                pipe.set(key, value, nx=nx)
            pipe.execute()
        except _ERRORS as exc:
            verb = "SET NX" if nx else "SET"
            raise self._unavailable(f"{verb} of {len(items)} keys", exc) from exc

    def put_if_absent(self, items: Mapping[str, bytes]) -> None:
        self._set_batch(items, nx=True)

    def replace(self, items: Mapping[str, bytes]) -> None:
        self._set_batch(items, nx=False)

    def claim(self, keys: Sequence[str], seconds: float) -> list[bool]:
        """SET NX of `claim:KEY` with a lease of `seconds` per key, in one pipeline."""
        if not keys:
            return []
        lease = max(1, round(seconds * 1000))
        try:
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.set(f"claim:{key}", b"1", nx=True, px=lease)
            return [bool(r) for r in pipe.execute()]
        except _ERRORS as exc:
            raise self._unavailable(f"claim of {len(keys)} keys", exc) from exc

    def close(self) -> None:
        with contextlib.suppress(*_ERRORS):
            self._client.close()


def _rebuild(url: str, socket_timeout: float, connect_timeout: float, retries: int) -> RedisMemo:
    return RedisMemo(url, socket_timeout=socket_timeout, connect_timeout=connect_timeout, retries=retries)
