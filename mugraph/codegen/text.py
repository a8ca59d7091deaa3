"""Line wrapping for emitted code, so the module stays within a 120-column lint limit, and the one way
data (names, paths, layout notes) enters its comments and docstring: `inert`."""

from __future__ import annotations

import textwrap

LIMIT = 116
BREAKS = (", ", " + ", " * ", " / ", " & ")


def inert(text: str) -> str:
    """`text` as it may stand in a comment or docstring of emitted code: printable ASCII stays, every
    other character (newline, NUL, U+202E, non-ASCII) and the quote and backslash that could end or
    bend a docstring become escapes such as `\\x22`. Data is never copied there raw: a newline would end
    the comment and run the rest as code, three quotes would end the docstring."""
    return "".join(c if " " <= c <= "~" and c not in '"\\' else _escape(c) for c in text)


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _break_point(line: str, limit: int) -> int:
    """The last operator or comma before `limit` inside brackets and outside strings, or -1."""
    depth, quote, best, best_depth = 0, "", -1, 1 << 30
    escaped = False
    for i, ch in enumerate(line[:limit]):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            else:
                quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            break
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif 0 < depth <= best_depth and i > 0 and any(line.startswith(b, i) for b in BREAKS if b[0] == ch):
            best, best_depth = i + (2 if ch == "," else 1), depth  # after ", "; before an operator
    return best


def wrap_code(line: str, limit: int = LIMIT) -> list[str]:
    """A statement split inside its brackets (implicit continuation), each piece under `limit`."""
    if len(line) <= limit:
        return [line]
    stripped = line.lstrip(" ")
    indent = " " * (len(line) - len(stripped) + 8)
    if stripped.startswith("#"):
        return wrap_comment(line, limit)
    head, sep, rhs = line.partition(" = ")
    if sep and head.strip().isidentifier() and "#" not in rhs:
        line = f"{head} = ({rhs})"  # so the whole right-hand side can continue over lines
    out: list[str] = []
    rest = line
    while len(rest) > limit:
        cut = _break_point(rest, limit)
        if cut <= len(indent):
            break
        out.append(rest[:cut].rstrip())
        rest = indent + rest[cut:].lstrip()
    return [*out, rest]


def wrap_comment(line: str, limit: int = LIMIT) -> list[str]:
    stripped = line.lstrip(" ")
    lead = line[: len(line) - len(stripped)]
    body = stripped.removeprefix("#").strip()
    return textwrap.wrap(
        body,
        limit,
        initial_indent=f"{lead}# ",
        subsequent_indent=f"{lead}#     ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def wrap_text(line: str, limit: int = LIMIT) -> list[str]:
    """A docstring line, continued with four more spaces of indent."""
    if len(line) <= limit:
        return [line]
    lead = " " * (len(line) - len(line.lstrip(" ")))
    return textwrap.wrap(
        line.strip(),
        limit,
        initial_indent=lead,
        subsequent_indent=lead + "    ",
        break_long_words=False,
        break_on_hyphens=False,
    )
