"""What every verdict-memo backend provides (`MemoStore`) and how it fails (`MemoUnavailable`).

Kept apart from `memo` so that backends (`redis_memo`) and the layered memo both import it, and neither
imports the other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

__all__ = ["MAX_VALUE_BYTES", "MemoStore", "MemoUnavailable", "check_items"]

# Memo values are short verdict codes, never pickles or other serialised objects.
MAX_VALUE_BYTES = 64


class MemoUnavailable(Exception):
    """The shared memo backend cannot be reached (connection refused, timeout, server error)."""


@runtime_checkable
class MemoStore(Protocol):
    """A shared key → verdict-bytes store. Every method takes or returns one whole batch."""

    name: str

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of `keys`, in order; None where a key is absent. One round trip."""
        ...

    def put_if_absent(self, items: Mapping[str, bytes]) -> None:
        """Store each value unless its key already has one (first writer wins; idempotent)."""
        ...

    def replace(self, items: Mapping[str, bytes]) -> None:
        """Store each value unconditionally. Only for repairing values that failed validation."""
        ...

    def claim(self, keys: Sequence[str], seconds: float) -> list[bool]:
        """Reserve each key for the caller for `seconds` (a lease that lapses by itself), so that
        of several workers about to compute one verdict, one does and the others wait for it.
        True where the caller holds the claim now; False where another does."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...


def check_items(items: Mapping[str, bytes]) -> None:
    """Raise ValueError unless every key is a str and every value short bytes."""
    for key, value in items.items():
        if not isinstance(key, str):
            raise ValueError(f"memo keys must be str, got {type(key).__name__}: {key!r}")
        if not isinstance(value, bytes):
            raise ValueError(f"memo values must be bytes, got {type(value).__name__} for key {key!r}")
        if len(value) > MAX_VALUE_BYTES:
            raise ValueError(
                f"memo value for key {key!r} is {len(value)} bytes; values are short verdict codes "
                f"(at most {MAX_VALUE_BYTES} bytes), never serialised objects"
            )
