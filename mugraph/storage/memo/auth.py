"""Authenticated memo values: anyone who can write the shared Redis must not change a result unnoticed.

A run holds a secret (32 random bytes in a `memo.key` file, mode 600, kept beside the store or in the
memo directory; `$MUGRAPH_MEMO_KEY` instead, to share verdicts between runs and machines). Values are
stored as verdict + HMAC-SHA256(secret, key NUL verdict)[:16], under keys prefixed by an id of the secret,
so runs with other secrets do not overwrite each other. A value whose tag does not match (written by
someone without the secret, or altered) is not trusted: the verdict is solved again and rewritten.

The secret reaches the workers inside the memo URL they are given (a `mugraph_key` query parameter,
removed before the URL goes to redis-py and from every message).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from mugraph.ir.errors import MugraphError
from mugraph.ir.names import printable
from mugraph.storage.safe_files import LinkFound, open_nofollow, read_nofollow, write_nofollow

__all__ = ["ENV_SECRET", "SECRET_PARAM", "MemoSigner", "attach_secret", "load_secret", "split_secret"]

SECRET_PARAM = "mugraph_key"
ENV_SECRET = "MUGRAPH_MEMO_KEY"
KEY_FILE = "memo.key"
TAG_BYTES = 16
UNTRUSTED = b"\x00untrusted"  # what a value that fails its check reads as: never a verdict


class MemoDirUnwritable(MugraphError):
    """The memo's directory (its secret, or a private server's data) cannot be made or written."""


def load_secret(directory: Path) -> bytes:
    """$MUGRAPH_MEMO_KEY if set, else the secret in `directory/memo.key` (made on first use, mode 600;
    never read or written through a link, which is refused)."""
    env = os.environ.get(ENV_SECRET)
    if env:
        try:
            return env.encode()
        except UnicodeEncodeError:  # bytes that are not UTF-8, kept by Python as lone surrogates
            raise MugraphError(
                f"${ENV_SECRET} is not UTF-8 text; set it to a text secret (for example the "
                "output of `openssl rand -hex 32`)"
            ) from None
    file = directory / KEY_FILE
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            fd = open_nofollow(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        text = read_nofollow(file).decode("utf-8").strip()
        if len(text) < 32:  # a file cut short by a crash mid-write: replace it (the old entries are re-solved)
            text = secrets.token_hex(32)
            write_nofollow(file, text.encode(), mode=0o600)
    except LinkFound as exc:
        raise MugraphError(
            f"memo directory damaged: {printable(str(file))}: {exc.problem}; remove it to make a "
            "new secret (verdicts sealed with the old one are then solved again)"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:  # a full disk is said as every full disk is: free space, run again
            raise OSError(exc.errno, exc.strerror, str(file)) from None
        raise MemoDirUnwritable(f"cannot keep the memo secret in {file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise MugraphError(
            f"{printable(str(file))} is not a memo secret (not UTF-8 text; mugraph writes 64 hex "
            "digits); remove it to make a new one (verdicts sealed with the old secret are then solved "
            "again)"
        ) from None
    return text.encode()


def attach_secret(url: str, secret: bytes) -> str:
    """`url` with the secret as a query parameter, for the workers."""
    return f"{url}{'&' if '?' in url else '?'}{urlencode({SECRET_PARAM: secret.decode()})}"


def split_secret(url: str) -> tuple[str, bytes | None]:
    """(the URL without the secret parameter, the secret or None)."""
    base, sep, query = url.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True) if sep else []
    secret = next((v for k, v in pairs if k == SECRET_PARAM), None)
    if secret is None:
        return url, None
    rest = urlencode([(k, v) for k, v in pairs if k != SECRET_PARAM])
    return (f"{base}?{rest}" if rest else base), secret.encode()


class MemoSigner:
    """Seals verdicts for one secret, and checks them."""

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("the memo secret is empty")
        self._secret = secret
        self.prefix = "a" + hashlib.sha256(b"mugraph-memo-key-id\0" + secret).hexdigest()[:12] + ":"

    def _tag(self, key: str, verdict: bytes) -> bytes:
        return hmac.new(self._secret, key.encode() + b"\0" + verdict, hashlib.sha256).digest()[:TAG_BYTES]

    def seal(self, key: str, verdict: bytes) -> bytes:
        return verdict + self._tag(key, verdict)

    def open(self, key: str, value: bytes) -> bytes:
        """The verdict, or UNTRUSTED when the tag does not match."""
        verdict, tag = value[:-TAG_BYTES], value[-TAG_BYTES:]
        if len(value) <= TAG_BYTES or not hmac.compare_digest(tag, self._tag(key, verdict)):
            return UNTRUSTED
        return verdict
