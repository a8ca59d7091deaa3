"""The Redis backend of the verdict memo: one MGET per lookup batch, one pipeline of SET NX per store.

Values are short verdict bytes (see `mugraph.storage.memo.base.check_items`), never pickles; with a
secret (`secret=`, or a `mugraph_key` parameter in the URL, see `memo_auth`) each value carries an HMAC
and a value without a valid one reads as untrusted (never as a verdict). Every Redis
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

from mugraph.storage.memo.auth import UNTRUSTED, MemoSigner, attach_secret, split_secret
from mugraph.storage.memo.base import MemoStore, MemoUnavailable, check_items
from mugraph.storage.memo.url import redact_url

__all__ = ["RedisMemo"]

_ERRORS = (redis.exceptions.RedisError, OSError)


def _describe(url: str) -> str:
    """The URL without a password or a memo secret."""
    return redact_url(split_secret(url)[0])


class RedisMemo(MemoStore):
    """A `MemoStore` on a Redis server named by a URL (`redis://[user:pass@]host:port/db`, `rediss://…`,
    `unix:///path/to/sock`).

    With a secret, keys are prefixed by the secret's id and values sealed by its HMAC (see `memo_auth`);
    `untrusted` counts values read back that failed the check.

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
        secret: bytes | None = None,
    ) -> None:
        plain, in_url = split_secret(url)
        secret = secret if secret is not None else in_url
        self.url = attach_secret(plain, secret) if secret is not None else plain
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.untrusted = 0
        # the first value read back that failed its check, as Redis holds it: (stored key, raw value)
        self.first_untrusted: tuple[str, bytes] | None = None
        self._signer = MemoSigner(secret) if secret is not None else None
        self._client: Any = redis.Redis.from_url(
            plain,
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
        return MemoUnavailable(f"{what} on {_describe(self.url)} failed: {type(exc).__name__}: {redact_url(str(exc))}")

    def ping(self) -> bool:
        """True when the server answers; raises MemoUnavailable when it cannot be reached."""
        try:
            return bool(self._client.ping())
        except _ERRORS as exc:
            raise self._unavailable("PING", exc) from exc

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        signer = self._signer
        try:
            values: list[bytes | None] = self._client.mget(
                list(keys) if signer is None else [signer.prefix + k for k in keys]
            )
        except _ERRORS as exc:
            raise self._unavailable(f"MGET of {len(keys)} keys", exc) from exc
        if signer is None:
            return values
        opened = [None if v is None else signer.open(k, v) for k, v in zip(keys, values, strict=True)]
        self.untrusted += sum(1 for o in opened if o is UNTRUSTED)
        if self.first_untrusted is None:
            self.first_untrusted = next(
                ((signer.prefix + k, v) for k, v, o in zip(keys, values, opened, strict=True) if o is UNTRUSTED and v),
                None,
            )
        return opened

    def _set_batch(self, items: Mapping[str, bytes], *, nx: bool) -> None:
        if not items:
            return
        check_items(items)
        signer = self._signer
        if signer is not None:
            items = {signer.prefix + k: signer.seal(k, v) for k, v in items.items()}
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
        """SET NX of `claim:KEY` (KEY namespaced as the values are) with a lease of `seconds` per
        key, in one pipeline. A claim key without an expiry was not set by a claim (a lease always
        lapses): it is taken over, so a stray or tampered key cannot block a verdict for ever."""
        if not keys:
            return []
        lease = max(1, round(seconds * 1000))
        prefix = "" if self._signer is None else self._signer.prefix
        names = [f"claim:{prefix}{key}" for key in keys]
        try:
            pipe = self._client.pipeline(transaction=False)
            for name in names:
                pipe.set(name, b"1", nx=True, px=lease)
            held = [bool(r) for r in pipe.execute()]
            others = [i for i, h in enumerate(held) if not h]
            if others:
                pipe = self._client.pipeline(transaction=False)
                for i in others:
                    pipe.pttl(names[i])
                stray = [i for i, ttl in zip(others, pipe.execute(), strict=True) if ttl == -1]
                if stray:
                    pipe = self._client.pipeline(transaction=False)
                    for i in stray:
                        pipe.set(names[i], b"1", px=lease)
                        held[i] = True
                    pipe.execute()
            return held
        except _ERRORS as exc:
            raise self._unavailable(f"claim of {len(keys)} keys", exc) from exc

    def close(self) -> None:
        with contextlib.suppress(*_ERRORS):
            self._client.close()


def _rebuild(url: str, socket_timeout: float, connect_timeout: float, retries: int) -> RedisMemo:
    return RedisMemo(url, socket_timeout=socket_timeout, connect_timeout=connect_timeout, retries=retries)
