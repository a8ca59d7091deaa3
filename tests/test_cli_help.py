"""What a new user reads first: `mugraph --help`, each command's help and `mugraph list`."""

from __future__ import annotations

import pytest

from mugraph.cli.app import COMMAND_HELP, cli, main
from mugraph.programs import builtin_programs

WORKFLOW = ["list", "check", "explain", "optimize", "status", "show", "report", "emit"]


def _out(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        main(argv)
    except SystemExit as e:  # click may end `--help` with an exit of status 0
        assert e.code in (0, None)
    out: str = capsys.readouterr().out
    return out


def _command_rows(text: str) -> list[tuple[str, str]]:
    section = text.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in section.splitlines():
        name, _, summary = line.strip().partition(" ")
        rows.append((name, summary.strip()))
    return rows


def test_help_lists_commands_in_workflow_order_with_whole_summaries(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _command_rows(_out(["--help"], capsys))
    names = [name for name, _ in rows]
    assert names[: len(WORKFLOW)] == WORKFLOW
    assert sorted(names) == sorted(cli.commands)  # every command is listed once
    for name, summary in rows:
        assert summary == COMMAND_HELP[name][0], name  # one whole line: not cut, not wrapped
        assert not summary.endswith("..."), name


@pytest.mark.parametrize("command", sorted(COMMAND_HELP))
def test_every_command_help_ends_with_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _out([command, "--help"], capsys)
    tail = text.rsplit("Example", 1)
    assert len(tail) == 2, text
    examples = [line.strip() for line in tail[1].splitlines()[1:] if line.strip()]
    assert examples and all(e.startswith(f"mugraph {command} ") or e == f"mugraph {command}" for e in examples)


def test_list_prints_aligned_columns(capsys: pytest.CaptureFixture[str]) -> None:
    main(["list"])
    lines = capsys.readouterr().out.splitlines()
    programs = builtin_programs()
    assert len(lines) == 1 + len(programs)  # a header, then one row per program
    starts = {
        line.index(word)
        for line, word in zip(lines, ["description", *(p.description for p in programs.values())], strict=True)
    }
    assert len(starts) == 1  # the description column starts at the same offset in every row
    for line, (name, prog) in zip(lines[1:], programs.items(), strict=True):
        assert line.split()[:3] == [name, prog.preset, str(len(prog.experts))]
