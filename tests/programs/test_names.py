"""Names are data: which names graphs and programs accept, how a refused one is shown, and a program file
told apart from the user when a KeyboardInterrupt ends its loading."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mugraph.ir import KernelGraph, MugraphError, to_json
from mugraph.ir.names import check_label, check_tensor_name, printable, shown
from mugraph.programs import builtin_programs, load_program
from mugraph.programs.loader import ProgramLoadError
from mugraph.programs.program import Program
from tests.helpers.cli_runs import as_from_a_terminal

REALISTIC_TENSORS = ["X", "W1", "x.weight", "layer0/q", "attn-out", "h[0]", "_tmp", "0bias", "q+k", "f0:o1", "a" * 128]
REALISTIC_LABELS = ["lora", "gated_mlp", "my-prog v2", "attn.fp16", "x+y"]
HOSTILE = [
    "",
    "X\x00Y",
    "X\nY",
    "X\rY",
    "X\u202eY",
    "X\u2028Y",
    "X\u200bY",
    "'X'",
    '"X"',
    "X\\Y",
    "X=1",
    "X Y",
    "-X",
    ".X",
    "X\tY",
    "Ω",
    "a" * 129,
    'p"""',
    "X#Y",
    "X;Y",
    "X,Y",
    "X(Y)",
]


def test_every_builtin_program_and_its_graphs_pass() -> None:
    for name, prog in builtin_programs().items():
        assert check_label(name, "program") == name
        for build in (prog.reference, *prog.experts.values()):
            graph = build()
            for n, _, _ in graph.input_signature():
                check_tensor_name(n, "input")


@pytest.mark.parametrize("name", REALISTIC_TENSORS)
def test_realistic_tensor_names_are_accepted(name: str) -> None:
    g = KernelGraph()
    g.mark_output(g.exp(g.new_input((4, 4), name=name)), name)
    assert g.input_signature()[0][0] == name


@pytest.mark.parametrize("name", REALISTIC_LABELS)
def test_realistic_program_names_are_accepted(name: str) -> None:
    assert Program(name, "d", "mlp", KernelGraph).name == name


@pytest.mark.parametrize("name", HOSTILE + ["X Y "])
def test_unsafe_names_are_refused_and_shown_escaped(name: str) -> None:
    with pytest.raises(MugraphError) as tensor:
        KernelGraph().new_input((4, 4), name=name)
    g = KernelGraph()
    x = g.new_input((4, 4), name="X")
    with pytest.raises(MugraphError) as output:
        g.mark_output(x, name)
    for e in (tensor, output):
        text = str(e.value)
        assert text.isascii() and text.isprintable() and ("name" in text), text
    if name not in ("X Y", "my-prog v2"):
        with pytest.raises(MugraphError):
            check_label(name, "program")


def test_shown_and_printable_never_give_raw_control_or_bidi_characters() -> None:
    for text in HOSTILE:
        assert shown(text).isascii() and shown(text).isprintable()
        assert printable(text).isprintable()
    assert printable("a path/with μ") == "a path/with μ"  # printable text stays readable
    assert len(shown("a" * 1000)) <= 80


def test_output_and_input_names_are_unique() -> None:
    g = KernelGraph()
    x = g.new_input((4, 4), name="X")
    with pytest.raises(MugraphError, match="input name 'X' is taken"):
        g.new_input((4, 4), name="X")
    g.mark_output(g.exp(x), "O")
    with pytest.raises(MugraphError, match="output name 'O' is taken"):
        g.mark_output(x, "O")
    g.mark_output(x, "X")  # an output may share an input's name: they are given and returned apart
    g2 = KernelGraph()
    y = g2.new_input((4, 4), name="X")
    g2.mark_output(y, "out1")
    with pytest.raises(MugraphError, match="output name 'out1' is taken"):
        g2.mark_output(y)  # the default name of the second output


def _json_program(tmp_path: Path, name: str, expert: str) -> Path:
    g = KernelGraph()
    g.mark_output(g.exp(g.new_input((4, 4), name="X")), "O")
    data = {"schema": "mugraph.program/1", "name": name, "reference": to_json(g), "experts": {expert: to_json(g)}}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("name", "expert", "what"), [("p\u202e", "e", "program name"), ("p", "e\n", "expert name")])
def test_loader_refuses_hostile_program_and_expert_names_in_one_escaped_line(
    tmp_path: Path, name: str, expert: str, what: str
) -> None:
    load_program(_json_program(tmp_path, "p", "e"))  # the same program with plain names loads
    with pytest.raises(ProgramLoadError) as info:
        load_program(_json_program(tmp_path, name, expert))
    text = str(info.value)
    assert what in text and text.isascii() and text.isprintable(), text


def test_python_program_raising_its_own_keyboardinterrupt_is_still_its_error(tmp_path: Path) -> None:
    path = tmp_path / "ki.py"
    path.write_text("def reference():\n    raise KeyboardInterrupt\n")
    with pytest.raises(ProgramLoadError, match="reference raises KeyboardInterrupt"):
        load_program(path)


SLOW = """\
import time
from pathlib import Path

Path("loading").write_text("")
time.sleep(120)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_a_program_file_loads_is_an_interrupt(tmp_path: Path, signum: int) -> None:
    """Ctrl-C (or SIGTERM) while a slow .py program runs: exit 130 and the interrupt line, not an error
    blaming the file."""
    (tmp_path / "slow.py").write_text(SLOW)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mugraph.cli", "check", "slow.py"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "loading").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = err.strip().splitlines()
    assert proc.returncode == 130, err
    assert len(lines) == 1 and "interrupted" in lines[0] and "slow.py" not in lines[0], err
