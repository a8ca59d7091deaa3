"""Open the verdict memo a command runs with: a shared server, a private one, or none."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo import LayeredMemo, MemoStore, MemoUnavailable, open_memo_store
from mugraph.storage.redis_server import EmbeddedRedis


@contextmanager
def verdict_memo(
    memo_url: str | None, data_dir: Path, valid_values: frozenset[bytes]
) -> Iterator[LayeredMemo]:
    """`memo_url` None: a private redis-server keeping its AOF in `data_dir`, stopped on exit
    (Ctrl-C included). `redis://...` / `unix://...`: that shared server, which must answer now.
    `local`: the per-process LRU alone."""
    if memo_url is None:
        with EmbeddedRedis(data_dir) as server:
            backend = open_memo_store(server.url)
            try:
                yield LayeredMemo(backend, valid_values=valid_values)
            finally:
                backend.close()
        return
    store: MemoStore | None = None if memo_url == "local" else open_memo_store(memo_url)
    if store is not None:
        problem = _unreachable(store)
        if problem:
            store.close()
            raise MugraphError(
                f"cannot reach the memo server at {memo_url} ({problem}); start it, or leave out "
                "--memo-url to use a private one"
            )
    memo = LayeredMemo(store, valid_values=valid_values)
    try:
        yield memo
    finally:
        memo.close()


def _unreachable(store: MemoStore) -> str:
    """Why the store does not answer, or '' when it does."""
    ping = getattr(store, "ping", None)
    if not callable(ping):
        return ""
    try:
        return "" if ping() else "no answer to PING"
    except MemoUnavailable as e:
        return str(e)
