"""What `optimize` says of a wrong program or option, from the command line and from Python alike: a
run store given as the program is named a run store, a model file names the one definition it lacks,
a library call names its `store=` argument (the command line its `--store`), and every refused option
value is an OptionError, a ValueError too where the value has the right type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mugraph.api
from mugraph.cli import main
from mugraph.ir.errors import MugraphError
from mugraph.programs import load_program
from mugraph.programs.loader import ProgramLoadError
from mugraph.run.options import OptimizeOptions, OptionError
from mugraph.run.prepare import prepare
from mugraph.run.resume import how_to_resume
from tests.helpers.run_store import new_store


def _error_line(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mugraph: error: "), lines
    return lines[0]


def test_a_run_store_given_as_the_program_says_what_reads_it_and_how_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "run.zarr"
    new_store(store).close()  # a run stopped before its end
    line = _error_line(capsys, ["optimize", str(store), "--workers", "1"])
    assert f"{store} is a run store, not a program: `mugraph status {store}`, `show` or `report` read it" in line
    assert line.endswith(how_to_resume(store, {})) and "no such file" not in line, line
    (tmp_path / "plain").mkdir()
    line = _error_line(capsys, ["optimize", str(tmp_path / "plain"), "--workers", "1"])
    assert "a directory, not a program file" in line and "no such file" not in line, line


@pytest.mark.parametrize(
    ("source", "lacking"),
    [
        ("model = lambda x: x\n", "defines `model` but no `example_inputs`"),
        ("example_inputs = ()\n", "defines `example_inputs` but no `model`"),
        ("x = 1\n", "defines no `reference`"),
    ],
)
def test_a_program_file_names_the_definition_it_lacks(tmp_path: Path, source: str, lacking: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    with pytest.raises(ProgramLoadError) as err:
        load_program(path)
    assert str(err.value).startswith(f"{path}: {lacking}"), err.value


def test_a_store_that_is_a_file_is_named_as_its_caller_gave_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("mine")
    with pytest.raises(MugraphError) as err:
        prepare("rms_norm", OptimizeOptions(store=afile))
    assert str(err.value).startswith(f"store={str(afile)!r} is a file") and "--store" not in str(err.value)
    line = _error_line(capsys, ["optimize", "rms_norm", "--store", str(afile), "--workers", "1"])
    assert f"--store {afile} is a file" in line and "store=" not in line, line
    assert afile.read_text() == "mine"


@pytest.mark.parametrize(
    "option",
    [{"time_limit": -1}, {"time_limit": 0.0}, {"time_limit": "-1"}, {"time_limit": "soon"}, {"workers": 0}],
)
def test_an_option_value_out_of_range_is_an_option_error_and_a_value_error(option: dict[str, Any]) -> None:
    ((name, value),) = option.items()
    with pytest.raises(OptionError) as err:  # the library refuses it before it captures the model
        mugraph.api.optimize(object(), (), **option)
    assert isinstance(err.value, mugraph.api.OptionValueError) and str(err.value).startswith(f"{name}={value!r}")
    if name == "time_limit":  # the command line's own words for --time-limit, not the keyword
        with pytest.raises(OptionError) as err:
            OptimizeOptions(**option, command=("optimize", "rms_norm"))
        assert isinstance(err.value, ValueError) and str(err.value).startswith("time limit "), err.value


@pytest.mark.parametrize(
    "option",
    [
        {"workers": "2"},
        {"budget": True},
        {"worker": 2},
        {"fresh": "no"},  # truthy: it would delete the store
        {"settings": "grids"},
        {"scheduler": 5},
        {"layouts": "yes"},
    ],
)
def test_an_option_of_the_wrong_type_or_name_is_an_option_error_but_no_value_error(option: dict[str, Any]) -> None:
    with pytest.raises(OptionError) as err:
        mugraph.api.optimize(object(), (), **option)
    assert isinstance(err.value, TypeError) and not isinstance(err.value, ValueError)
