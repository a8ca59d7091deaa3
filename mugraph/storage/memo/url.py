"""What a `--memo-url` may be, checked before anything starts: `local`, `redis://[USER:PASS@]HOST:PORT/DB`,
`rediss://…` (TLS) or `unix:///PATH/TO/SOCKET`."""

from __future__ import annotations

from urllib.parse import urlsplit

from mugraph.ir.errors import MugraphError

SCHEMES = ("redis", "rediss", "unix")


def check_memo_url(url: str) -> None:
    """A MugraphError naming what is wrong with `url` (scheme, host, port or database number)."""
    if url == "local":
        return
    hint = "use redis://[USER:PASSWORD@]HOST:PORT/DB, rediss://… (TLS), unix:///PATH/TO/SOCKET or 'local'"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise MugraphError(f"--memo-url {url!r}: the port is not a number from 1 to 65535; {hint}") from None
    if parts.scheme not in SCHEMES:
        raise MugraphError(f"--memo-url {url!r}: unsupported scheme; {hint}")
    if parts.scheme == "unix":
        if not parts.path:
            raise MugraphError(f"--memo-url {url!r}: no socket path; {hint}")
        return
    if not parts.hostname:
        raise MugraphError(f"--memo-url {url!r}: no host; {hint}")
    if port == 0:
        raise MugraphError(f"--memo-url {url!r}: port 0 is not a server's port; {hint}")
    db = parts.path.strip("/")
    if db and not (db.isdigit() and int(db) < 2**31):
        raise MugraphError(f"--memo-url {url!r}: the database {db!r} is not a number; {hint}")


def describe_url(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return url
