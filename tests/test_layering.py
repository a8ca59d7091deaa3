"""The rooms table in docs/design.md is the layering rule: every module imports only the rooms and
outside libraries its room's row lists, and every package has a row. Imports inside functions count."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
ROW = re.compile(r"^\| ([a-z_.]+) \| [^|]+ \| ([^|]+) \| ([^|]+) \|$")


def rooms_table() -> dict[str, tuple[set[str], set[str]]]:
    """room -> (rooms it may import, libraries it may import), from the design document."""
    table: dict[str, tuple[set[str], set[str]]] = {}
    for line in DESIGN.read_text().splitlines():
        m = ROW.match(line.strip())
        if m and m.group(1) != "room":
            rooms, libs = ({w.strip() for w in cell.split(",")} - {"—", ""} for cell in m.groups()[1:])
            table[m.group(1)] = (rooms, libs)
    return table


def room_of(module: str, package: Path = ROOT / "mugraph") -> str | None:
    """`mugraph.stages.search.expand` -> `stages.search`; `mugraph.__main__` -> cli (it starts the
    command line); other top-level modules (`api.py`) and the package itself -> api."""
    parts = module.split(".")
    if module == "mugraph.__main__":
        return "cli"
    if len(parts) == 1 or (len(parts) == 2 and not (package / parts[1]).is_dir()):
        return "api"
    if parts[1] == "stages":
        return None if len(parts) == 2 else "stages." + parts[2]
    return parts[1]


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def violations(package: Path = ROOT / "mugraph") -> list[str]:
    table = rooms_table()
    bad: list[str] = []
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        room = room_of(module, package)
        if room is None:
            if imports(path):
                bad.append(f"{module}: belongs to no room but imports {sorted(imports(path))}")
            continue
        if room not in table:
            bad.append(f"{module}: room {room!r} has no row in docs/design.md")
            continue
        may_rooms, may_libs = table[room]
        for target in sorted(imports(path)):
            top = target.split(".")[0]
            if target == "mugraph":
                continue  # the package root: its version
            if top == "mugraph":
                other = room_of(target, package)
                if other not in (None, room) and "*" not in may_rooms and other not in may_rooms:
                    bad.append(f"{module} imports {target} (room {other}, not in {room}'s row)")
            elif top not in sys.stdlib_module_names and top not in may_libs:
                bad.append(f"{module} imports the library {top} (not in {room}'s row)")
    return bad


def test_design_table_is_read() -> None:
    table = rooms_table()
    assert {"ir", "stages.search", "pipeline", "storage", "run", "api", "cli"} <= set(table)
    assert "distributed" not in table["stages.search"][1]


def test_only_the_command_line_imports_it() -> None:
    """The library and the run never import the command line: `cli` is in no other row, so a module
    outside `cli/` importing it is a violation (as `api.py` importing `cli.checks` once was)."""
    table = rooms_table()
    assert [room for room, (rooms, _) in table.items() if room != "cli" and ("cli" in rooms or "*" in rooms)] == []
    assert "run" in table["api"][0] and "run" in table["cli"][0]
    assert "api" not in table["cli"][0] and "api" not in table["run"][0]


def test_every_module_keeps_its_room() -> None:
    assert violations() == []


def test_a_stage_importing_the_pipeline_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "mugraph"
    for room in ("ir", "pipeline", "stages/search", "newroom", "cli"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text("")
    (package / "stages" / "search" / "bad.py").write_text(
        "import zarr\nfrom mugraph.ir import types\n\ndef f():\n    from mugraph.pipeline import driver\n"
    )
    (package / "api.py").write_text("from mugraph.cli import checks\n")
    found = violations(package)
    assert found == [
        "mugraph.api imports mugraph.cli (room cli, not in api's row)",
        "mugraph.newroom: room 'newroom' has no row in docs/design.md",
        "mugraph.stages.search.bad imports mugraph.pipeline (room pipeline, not in stages.search's row)",
        "mugraph.stages.search.bad imports the library zarr (not in stages.search's row)",
    ]


def test_tests_import_only_the_helpers() -> None:
    """A test module imports no other test module (one would run, or fail, with the other's
    imports); what tests share lives in tests/helpers/. Benchmarks hold to the same rule."""
    bad = []
    for folder in (ROOT / "tests", ROOT / "benchmarks"):
        for path in sorted(folder.rglob("*.py")):
            for target in imports(path):
                if target.split(".")[0] == "tests" and not target.startswith("tests.helpers") and target != "tests":
                    bad.append(f"{path.relative_to(ROOT)} imports {target}")
    assert bad == []
