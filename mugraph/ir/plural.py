"""Counts in messages: `1 worker`, `2 workers`, never `1 workers` or `1 worker(s)`. Every room that
prints a count (the console, the command line, the torch module's verdict) takes the word from here."""

from __future__ import annotations


def noun(n: int, word: str, plural: str | None = None) -> str:
    """`word` for one, else its plural (`word` + "s" unless given): for a count said apart from it."""
    return word if n == 1 else plural or word + "s"


def counted(n: int, word: str, plural: str | None = None) -> str:
    """`n` with thousands separators, then `word` or its plural: "1 worker", "1,024 states"."""
    return f"{n:,} {noun(n, word, plural)}"
