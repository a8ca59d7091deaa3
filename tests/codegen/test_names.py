"""Names are data in emitted code too. The loader refuses hostile names; these graphs carry them past it (as
a graph made by other code could), and the emitted module, run in Triton's interpreter, must treat every
one of them as data: nothing in a name, the program's name, the config line or a layout note runs."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from mugraph.codegen import EmitInfo, emit_module
from mugraph.codegen.check import check_module, load_module
from mugraph.codegen.text import inert, wrap_code
from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.types import OpKind

# Each would make a directory in the working directory if it ran as code.
INPUT = "X\n    os.mkdir('PW')\n    #"  # the input name the emitted kernel's comments show
OUTPUT = "O'] = 1; os.mkdir('PO'); x = ['"
PROGRAM = 'p"""\nimport os; os.mkdir("PP")\n"""'  # closes the module's docstring
CONFIG = 'c\r\nimport os\nos.mkdir("PC")  # \u202e'
LAYOUT = 'block graph of op 1 \nos.mkdir("PL")'  # a note the kernel's comments repeat
MADE = ("PW", "PO", "PP", "PC", "PL")


def _reference() -> KernelGraph:
    g = KernelGraph()
    g.mark_output(g.exp(g.new_input((4, 4), name="X")), "O")
    return g


def _expert() -> KernelGraph:
    """exp in one Triton kernel, whose comments name its input (a short line: a comment is rewrapped only
    past the line limit, so the newline in the name stays where it is)."""
    g = KernelGraph()
    b = BlockGraph(grid=(1, 1, 1), forloop=1)
    b.new_output(b.accum_no_red(b.exp(b.new_input(g.new_input((4, 4), name="X"), (-1, -1, -1)))), (-1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def _renamed(graph: KernelGraph, names: dict[str, str]) -> KernelGraph:
    """`graph` with inputs and outputs renamed past the builder's name check."""
    for i, op in enumerate(graph.ops):
        if op.kind in (OpKind.INPUT, OpKind.OUTPUT) and str(op.attr("name")) in names:
            attrs = tuple((k, names[str(v)] if k == "name" else v) for k, v in op.attrs)
            graph.ops[i] = dataclasses.replace(op, attrs=attrs)
    return graph


@pytest.mark.parametrize("hostile", ["input", "program", "all"])
def test_hostile_names_run_as_data_in_the_interpreter(
    hostile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One at a time (each alone ran as code before names were written as data), then all together."""
    monkeypatch.chdir(tmp_path)
    names = {"X": INPUT} if hostile == "input" else {} if hostile == "program" else {"X": INPUT, "O": OUTPUT}
    program = "p" if hostile == "input" else PROGRAM
    info = EmitInfo(program, CONFIG, layouts=(LAYOUT,)) if hostile == "all" else EmitInfo(program)
    graph, reference = _renamed(_expert(), names), _renamed(_reference(), names)
    text = emit_module(graph, info)
    module = load_module(text)
    report = check_module(module, reference)
    assert [name for name in MADE if (tmp_path / name).exists()] == []
    output, input_name = names.get("O", "O"), names.get("X", "X")
    assert report.ok and set(report.per_output) == {output}, report
    assert (module.PROGRAM, module.OUTPUTS, list(module.INPUTS)) == (program, (output,), [input_name])
    docstring = ast.get_docstring(ast.parse(text))
    assert docstring is not None and docstring.startswith(f"{program}: a μGraph")  # the name, as text
    assert all(raw not in text for raw in (INPUT, PROGRAM, CONFIG, LAYOUT)) and "\u202e" not in text


def test_inert_text_keeps_plain_text_and_escapes_the_rest() -> None:
    assert inert("rms_norm f0, config digest 0123abcd: [16, 64]") == "rms_norm f0, config digest 0123abcd: [16, 64]"
    for bad in ("\n", "\r", "\x00", '"', "\\", "\u202e", "\u2028", "μ"):
        shown = inert(f"a{bad}b")
        assert shown.isascii() and shown.isprintable() and '"' not in shown and shown.startswith("a\\")


def test_long_lines_are_not_broken_inside_a_string_with_escaped_quotes() -> None:
    name = "a', 'b\"" + ", x" * 40  # repr escapes the quote that would end it: 'a\', \'b"...'
    line = f"    return {{{name!r}: t1, {'c' * 30!r}: t2, {'d' * 30!r}: t3}}"
    wrapped = wrap_code(line)
    namespace: dict[str, object] = {}
    exec(compile("def f(t1, t2, t3):\n" + "\n".join(wrapped), "<emitted>", "exec"), namespace)
    assert namespace["f"](1, 2, 3) == {name: 1, "c" * 30: 2, "d" * 30: 3}  # type: ignore[operator]
