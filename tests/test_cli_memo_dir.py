"""A command that keeps a verdict memo (explain, prune, search) and cannot make its memo directory (a
read-only working directory, where the default runs/memo lies) says how to go on without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mugraph.cli import main


@pytest.mark.parametrize("command", ["explain", "prune", "search"])
def test_an_unwritable_memo_directory_names_the_options_that_go_on(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "afile").write_text("not a directory\n")  # the tests run as root: no read-only directory
    with pytest.raises(SystemExit) as exit_:
        main([command, "rms_norm", "--memo-dir", str(tmp_path / "afile" / "memo")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "cannot create the memo data directory" in err and len(err.strip().splitlines()) == 1, err
    assert "--memo-url local" in err and "--memo-dir you can write to" in err, err
