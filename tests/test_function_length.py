"""Functions stay short enough to read at once: a function past LIMIT lines holds several steps that
want names of their own. A few long ones remain where splitting would not help yet (the search's
block expansion); ALLOWED caps how many, so a new long function fails here, naming itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mugraph"
LIMIT = 80  # lines, from `def` (decorators aside) to the last line of the body
ALLOWED = 3  # functions over LIMIT the package may hold


def long_functions(package: Path = PACKAGE, limit: int = LIMIT) -> list[tuple[int, str]]:
    """(lines, `path:qualified name`) of every function or method over `limit` lines, longest first."""
    found: list[tuple[int, str]] = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append((lines, f"{path.relative_to(package.parent)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


@pytest.mark.unit
def test_at_most_a_few_functions_are_long() -> None:
    long = long_functions()
    listing = "\n".join(f"  {n} lines  {where}" for n, where in long)
    assert len(long) <= ALLOWED, f"{len(long)} functions over {LIMIT} lines (at most {ALLOWED}):\n{listing}"


@pytest.mark.unit
def test_the_count_sees_a_long_function(tmp_path: Path) -> None:
    """The measure itself: a function of LIMIT + 1 lines is found, one of LIMIT is not, methods too."""
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT - 1))
    (tmp_path / "m.py").write_text(
        f"def at_limit():\n{body}\n"
        f"class C:\n    def over(self):\n{''.join('    ' + line + chr(10) for line in body.splitlines())}"
        "        return 0\n"
    )
    assert [where.split(" ")[1] for _, where in long_functions(tmp_path)] == ["over"]
