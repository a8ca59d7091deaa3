"""What a `--memo-url` may be, checked before anything starts: `local`, `redis://[USER:PASS@]HOST:PORT/DB`,
`rediss://…` (TLS) or `unix:///PATH/TO/SOCKET`; and the one way such a URL is written anywhere.

A memo URL can hold a password (and, as the workers get it, the run's memo secret), so whatever
writes or prints one (the run store's command line, the report, messages, `--json` output, logs)
passes it through `redact_url` first. The run's identity never holds the URL: the memo is a cache,
so a run resumes with another memo, or none, and ends with the same answer."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo.auth import SECRET_PARAM

__all__ = ["SCHEMES", "check_memo_url", "redact_url"]

# scheme://USER:PASSWORD@ (the password up to the last @ before the host, as urlsplit reads it)
_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:@/\s]*:)[^/\s]*@")
# scheme://USERINFO@ without a colon: redis-py reads it as a user name, but it is as often a password
# written without its colon (`redis://PASS@host` for `redis://:PASS@host`), so it is never shown
_LONE_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://)[^:@/\s]+@")
# scheme://USER:@ with an empty password: as often the password with its colon on the wrong side
_EMPTY_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://)[^:@/\s]+:@")
# query parameters holding a secret: the run's memo secret, and redis-py's password (unix://…?password=)
_SECRET = re.compile(rf"(?P<head>[?&](?:{SECRET_PARAM}|password)=)[^&#\s'\"]*")

SCHEMES = ("redis", "rediss", "unix")


def check_memo_url(url: str) -> None:
    """A MugraphError naming what is wrong with `url` (scheme, host, port or database number)."""
    if url == "local":
        return
    shown = redact_url(url)
    hint = "use redis://[USER:PASSWORD@]HOST:PORT/DB, rediss://… (TLS), unix:///PATH/TO/SOCKET or 'local'"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise MugraphError(f"--memo-url {shown!r}: the port is not a number from 1 to 65535; {hint}") from None
    if parts.scheme not in SCHEMES:
        raise MugraphError(f"--memo-url {shown!r}: unsupported scheme; {hint}")
    if parts.scheme == "unix":
        if not parts.path:
            raise MugraphError(f"--memo-url {shown!r}: no socket path; {hint}")
        return
    if not parts.hostname:
        raise MugraphError(f"--memo-url {shown!r}: no host; {hint}")
    if port == 0:
        raise MugraphError(f"--memo-url {shown!r}: port 0 is not a server's port; {hint}")
    db = parts.path.strip("/")
    if db and not (db.isdigit() and int(db) < 2**31):
        raise MugraphError(f"--memo-url {shown!r}: the database {db!r} is not a number; {hint}")


def redact_url(text: str) -> str:
    """`text` (a URL, an argument such as `--memo-url=URL`, or a message holding URLs) with each URL's
    password and the memo secret replaced by `***`: `redis://:***@head:6379/0`, a user name beside a
    password kept, a lone one (`redis://X@head`, which may be a password missing its colon) or one
    before an empty password (`redis://X:@head`, the colon on the wrong side) not."""
    text = _EMPTY_PASSWORD.sub(lambda m: f"{m['head']}***:@", text)
    text = _PASSWORD.sub(lambda m: f"{m['head']}***@", text)
    text = _LONE_USERINFO.sub(lambda m: f"{m['head']}***@", text)
    return _SECRET.sub(lambda m: f"{m['head']}***", text)
