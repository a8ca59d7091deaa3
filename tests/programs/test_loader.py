"""Loading programs from built-in names, .py and .json files, and the CLI's exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mugraph.cli import main
from mugraph.ir import SCHEMA, KernelGraph, MugraphError, digest, dumps, to_json
from mugraph.ir.canonical import canonical_digest
from mugraph.pipeline.plan import program_config
from mugraph.programs import builtin_programs, get_builtin, load_program, resolve_program
from mugraph.programs.benchmarks import gqa_expert, lora_reference
from mugraph.programs.loader import PROGRAM_SCHEMA, ProgramLoadError
from mugraph.programs.program import WIDE_FOUR_INPUTS
from mugraph.stages.search.config import preset_config

FILES = Path(__file__).parent / "files"

# A small matmul program whose expert splits N over 2 blocks and K over a for-loop of 2.
# {scale} lets a test make the expert wrong.
PROGRAM = """\
from mugraph.ir import BlockGraph, KernelGraph

name = "tiny_mm"


def _inputs():
    g = KernelGraph()
    return g, g.new_input((4, 16), name="X"), g.new_input((16, 8), name="W")


def reference():
    g, x, w = _inputs()
    g.mark_output(g.matmul(x, w), "O")
    return g


def expert():
    g, x_d, w_d = _inputs()
    b = BlockGraph(grid=(2, 1, 1), forloop=2)
    x = b.new_input(x_d, (-1, -1, -1), fmap=1)
    w = b.new_input(w_d, (1, -1, -1), fmap=0)
    acc = b.accum_no_red(b.matmul(x, w))
    b.new_output({scale}, (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


experts = {{"fused": expert}}
"""

# Line 5 is the matmul whose inner dims differ.
SHAPE_ERROR_PROGRAM = """\
from mugraph.ir import KernelGraph
g = KernelGraph()
x = g.new_input((4, 8), name="X")
w = g.new_input((16, 2), name="W")
reference = g.matmul(x, w)
"""


def write(tmp_path: Path, filename: str, text: str) -> Path:
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    return path


def run_cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mugraph.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


def gqa_json() -> dict[str, Any]:
    """gqa_expert's JSON: ops 0-2 inputs Q, K, V; 3 and 4 customized; 5 the output."""
    data: dict[str, Any] = json.loads(dumps(gqa_expert()))
    return data


def load_error(path: Path) -> str:
    with pytest.raises(ProgramLoadError) as info:
        load_program(path)
    return str(info.value)


@pytest.fixture
def good_program(tmp_path: Path) -> Path:
    return write(tmp_path, "tiny_mm.py", PROGRAM.format(scale="acc"))


# -- resolve_program / load_program: Python files -------------------------------------------------


def test_resolve_builtin_name() -> None:
    prog = resolve_program("gqa")
    assert prog is get_builtin("gqa") and prog.source == "built-in"
    assert list(prog.experts) == ["expert", "paper"]


def test_resolve_unknown_builtin_name() -> None:
    with pytest.raises(MugraphError, match=re.escape("unknown program 'nosuch'; built-in programs are: ")):
        resolve_program("nosuch")


def test_a_name_that_is_a_file_here_without_its_suffix_is_suggested(
    good_program: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(good_program.parent)
    with pytest.raises(MugraphError, match=re.escape(f"did you mean the file {good_program.name}?")):
        resolve_program(good_program.stem)
    monkeypatch.chdir(tmp_path / "..")  # no such file here: the built-in list alone
    with pytest.raises(MugraphError, match=r"\(or pass a \.py or \.json file\)$"):
        resolve_program(good_program.stem)


def test_a_missing_file_names_the_one_likely_meant(
    good_program: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(good_program.parent)
    for spec in (f"./{good_program.stem}", f"{good_program.stem}.PY"):  # no suffix; the suffix's case
        with pytest.raises(MugraphError, match=re.escape(f"no such file; did you mean {good_program.name}?")):
            resolve_program(spec)
    with pytest.raises(MugraphError, match=re.escape("the built-in program is named 'rms_norm', without a suffix")):
        resolve_program("rms_norm.py")


# a program file's first lines: a reference of one op
EXP_REFERENCE = (
    "from mugraph.ir import KernelGraph\n"
    "def reference():\n"
    "    g = KernelGraph()\n"
    "    g.mark_output(g.exp(g.new_input((4, 4), name='X')), 'O')\n"
    "    return g\n"
)


def test_experts_as_a_list_is_refused_saying_what_they_may_be(tmp_path: Path) -> None:
    path = tmp_path / "listed.py"
    path.write_text(EXP_REFERENCE + "experts = [reference]\n")
    with pytest.raises(MugraphError, match=re.escape("listed.py:6: `experts` must be a dict")):
        load_program(path)


def test_every_unreadable_expert_is_named_at_once(tmp_path: Path) -> None:
    """Each malformed expert in one error (not only the first), and two keys naming one label refused."""
    path = tmp_path / "several.py"
    path.write_text(
        EXP_REFERENCE + "def empty():\n"
        "    g = KernelGraph()\n"
        "    g.new_input((4, 4), name='X')\n"
        "    return g\n"
        "def raising():\n"
        "    raise ValueError('not built')\n"
        "experts = {'empty': empty, 2: reference, 'raising': raising, '2': reference, 'fine': reference}\n"
    )
    msg = load_error(path)
    lines = msg.splitlines()
    assert lines[0] == "3 experts cannot be read:"
    assert lines[1] == f"{path}: experts['empty'] has no outputs (mark one with mark_output)"
    assert lines[2] == f"{path}:11: experts['raising']: ValueError: not built"
    assert lines[3] == f"{path}: two experts are labelled '2'"
    path.write_text(path.read_text().replace("'empty': empty, ", "").replace(", '2': reference", ""))
    assert load_error(path) == f"{path}:11: experts['raising']: ValueError: not built"
    path.write_text(path.read_text().replace("'raising': raising", "1: raising, '1': reference"))
    assert load_error(path).splitlines()[1:] == [
        f"{path}:11: experts[1]: ValueError: not built",
        f"{path}: two experts are labelled '1'",  # said with the unreadable one, not after it is mended
    ]


def test_every_unreadable_expert_of_a_json_program_is_named_at_once(tmp_path: Path) -> None:
    good = to_json(get_builtin("rms_norm").reference())
    data = {"schema": PROGRAM_SCHEMA, "reference": good, "experts": {"a": {"schema": "x"}, "b": 3, "c": good}}
    path = tmp_path / "several.json"
    path.write_text(json.dumps(data))
    assert load_error(path).splitlines() == [
        "2 experts cannot be read:",
        f"{path}: experts.a.schema: 'x' is not supported (expected 'mugraph.kernel-graph/1')",
        f"{path}: experts.b: expected an object, got int",
    ]


def test_load_valid_python_program(good_program: Path) -> None:
    prog = resolve_program(str(good_program))
    assert prog.name == "tiny_mm" and prog.preset == "mlp" and prog.source == str(good_program)
    assert list(prog.experts) == ["fused"]
    ref = prog.reference()
    assert ref.input_signature() == [("X", (4, 16), "float16"), ("W", (16, 8), "float16")]
    assert [t.shape for t in ref.output_tensors] == [(4, 8)]
    expert = prog.experts["fused"]()
    assert [t.shape for t in expert.output_tensors] == [(4, 8)]
    # builders return fresh graphs with the same content
    assert expert is not prog.experts["fused"]() and digest(expert) == digest(prog.experts["fused"]())


def test_python_shape_error_names_file_line_and_shapes(tmp_path: Path) -> None:
    path = write(tmp_path, "bad_shape.py", SHAPE_ERROR_PROGRAM)
    msg = load_error(path)
    assert msg.startswith(f"{path}:5: ")
    assert "matmul: A [4,8] has 8 columns but B [16,2] has 16 rows" in msg


def test_python_shape_error_inside_reference_function(tmp_path: Path) -> None:
    text = textwrap.dedent("""\
        from mugraph.ir import KernelGraph


        def reference():
            g = KernelGraph()
            a = g.new_input((4, 8))
            b = g.new_input((4, 3))
            return g.add(a, b)
        """)
    path = write(tmp_path, "bad_fn.py", text)
    msg = load_error(path)
    assert msg.startswith(f"{path}:8: reference: ")
    assert "add: operands [4,8] and [4,3] do not broadcast in dim 1" in msg


def test_python_error_in_an_expert_is_labelled(tmp_path: Path) -> None:
    text = PROGRAM.format(scale="acc").replace("forloop=2)", "forloop=3)")
    path = write(tmp_path, "bad_expert.py", text)
    lineno = text.splitlines().index("    x = b.new_input(x_d, (-1, -1, -1), fmap=1)") + 1
    msg = load_error(path)
    assert msg.startswith(f"{path}:{lineno}: experts['fused']: ")
    assert "input [4,16] fmap 1: per-block dim 1 (16) is not divisible by the for-loop range 3" in msg


def test_python_syntax_error_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "syntax.py", "from mugraph.ir import KernelGraph\n\nreference = (\n\nx = 1 +\n")
    assert load_error(path) == f"{path}:3: syntax error: '(' was never closed"


def test_python_syntax_error_exact_line(tmp_path: Path) -> None:
    path = write(tmp_path, "syntax2.py", "name = 'x'\nreference = None\ndef f(:\n    pass\n")
    assert load_error(path).startswith(f"{path}:3: syntax error: ")


def test_python_runtime_error_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "boom.py", "x = 1\ny = {}\nreference = y['missing']\n")
    assert load_error(path) == f"{path}:3: KeyError: 'missing'"


def test_python_without_reference(tmp_path: Path) -> None:
    path = write(tmp_path, "noref.py", "from mugraph.ir import KernelGraph\ngraph = KernelGraph()\n")
    assert load_error(path) == (
        f"{path}: defines no `reference` (a KernelGraph or a function returning one), nor `model` and "
        "`example_inputs` (a PyTorch module or function and its inputs)"
    )


def test_python_reference_of_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path, "wrongtype.py", "reference = 42\n")
    assert load_error(path) == f"{path}: reference must be a KernelGraph, got int"


def test_python_bad_preset(tmp_path: Path) -> None:
    text = PROGRAM.format(scale="acc") + "preset = 'conv'\n"
    path = write(tmp_path, "preset.py", text)
    assert load_error(path) == f"{path}: preset 'conv' is not one of mlp, lora, attention"


FOUR_INPUTS = """\
from mugraph.ir import KernelGraph
g = KernelGraph()
x, w, a, b = (g.new_input(s, name=n) for s, n in [((16, 64), "X"), ((64, 64), "W"), ((64, 16), "A"), ((16, 64), "B")])
g.mark_output(g.add(g.matmul(x, w), g.matmul(g.matmul(x, a), b)), "O")
reference = g
"""

WITH_EXP = """\
from mugraph.ir import KernelGraph
g = KernelGraph()
g.mark_output(g.exp(g.matmul(g.new_input((16, 64), name="X"), g.new_input((64, 64), name="W"))), "O")
reference = g
"""


@pytest.mark.parametrize(
    ("text", "preset"),
    [(FOUR_INPUTS, "lora"), (FOUR_INPUTS + "preset = 'mlp'\n", "mlp"), (WITH_EXP, "mlp")],
    ids=["four-inputs", "named", "exp"],
)
def test_a_program_that_names_no_preset_gets_the_one_its_ops_suggest(tmp_path: Path, text: str, preset: str) -> None:
    """Under mlp's five kernel ops (inputs counted) a four-input program's space is one state: a file
    that names none gets lora's, widened (`WIDE_FOUR_INPUTS`); one that names its preset gets it as
    it is. An exp keeps mlp (attention's grids miss the README's exp(X·W))."""
    prog = load_program(write(tmp_path, "prog.py", text))
    assert prog.preset == preset
    assert prog.settings == (WIDE_FOUR_INPUTS if text == FOUR_INPUTS else {})
    config = program_config(prog, None, {})
    assert config.preset == preset and (config.max_kernel_ops == 6) == (text == FOUR_INPUTS)
    assert program_config(prog, "lora", {}) == preset_config("lora")  # --preset: the preset as it is
    assert program_config(prog, None, {"max_kernel_ops": 7}).max_kernel_ops == 7  # --set wins


def test_a_four_input_norm_then_linear_with_bias_has_its_fused_kernel_in_its_default_space(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The program a PyTorch RMSNorm + Linear(bias=True) lowers to: under lora's own settings its
    fused kernel lies outside the space (the whole space held no μGraph); under the default it is in."""
    main(["explain", str(FILES / "norm_linear_bias.py"), "--memo-url", "local", "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [r["inside"] for r in rows] == [True], rows
    main(["explain", str(FILES / "norm_linear_bias.py"), "--memo-url", "local", "--json", "--preset", "lora"])
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [r["inside"] for r in rows] == [False], rows


def test_a_program_imports_a_helper_module_kept_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As `python FILE` would: the file's folder is on the path while it runs (and only then)."""
    folder = tmp_path / "mine"
    folder.mkdir()
    write(folder, "shapes_helper_for_test.py", "X_SHAPE = (4, 16)\n")
    text = (
        PROGRAM.format(scale="acc")
        .replace(
            "from mugraph.ir import BlockGraph, KernelGraph\n",
            "from mugraph.ir import BlockGraph, KernelGraph\nfrom shapes_helper_for_test import X_SHAPE\n",
        )
        .replace('g.new_input((4, 16), name="X")', 'g.new_input(X_SHAPE, name="X")')
    )
    monkeypatch.chdir(tmp_path)  # not the program's folder
    prog = load_program(write(folder, "uses_helper.py", text))
    assert prog.reference().tensors[0].shape == (4, 16)
    assert str(folder) not in sys.path


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        pytest.param("missing.py", "no such file", id="missing"),
        pytest.param("program.txt", "a program file must end in .py or .json", id="suffix"),
    ],
)
def test_bad_paths(tmp_path: Path, filename: str, expected: str) -> None:
    path = tmp_path / filename
    if filename.endswith(".txt"):
        path.write_text("reference = None\n", encoding="utf-8")
    with pytest.raises(ProgramLoadError, match=re.escape(f"{path}: {expected}")):
        resolve_program(str(path))


# -- JSON files ---------------------------------------------------------------------------------------


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.json", '{\n  "schema": "mugraph.kernel-graph/1",\n  "ops": [,]\n}\n')
    msg = load_error(path)
    assert msg == f"{path}:3:11: invalid JSON: Expecting value"


def test_json_round_trip_keeps_digest(tmp_path: Path) -> None:
    for label, graph in [("gqa_expert", gqa_expert()), ("lora_reference", lora_reference())]:
        path = write(tmp_path, f"{label}.json", dumps(graph))
        prog = load_program(path)
        assert prog.name == label and prog.experts == {}
        loaded = prog.reference()
        assert digest(loaded) == digest(graph)
        assert dumps(loaded) == dumps(graph)


@pytest.mark.parametrize("name", sorted(builtin_programs()))
def test_builtin_graphs_round_trip_through_json_files(tmp_path: Path, name: str) -> None:
    prog = builtin_programs()[name]
    graphs = {"reference": prog.reference(), **{k: b() for k, b in prog.experts.items()}}
    for label, graph in graphs.items():
        path = write(tmp_path, f"{label}.json", dumps(graph))
        assert digest(load_program(path).reference()) == digest(graph)


def _kernel_json_case(mutate: str) -> dict[str, Any]:
    data = gqa_json()
    if mutate == "imap-2-ints":
        data["ops"][3]["block"]["ops"][1]["imap"] = [0, 2]
    elif mutate == "imap-invalid":
        data["ops"][3]["block"]["ops"][1]["imap"] = [0, 5, -1]
    elif mutate == "unknown-kind":
        data["ops"][5]["kind"] = "softmax"
    elif mutate == "unknown-block-kind":
        data["ops"][4]["block"]["ops"][2]["kind"] = "customized"
    elif mutate == "input-out-of-range":
        data["ops"][5]["inputs"] = [42]
    elif mutate == "arity":
        data["ops"][5]["inputs"] = [5, 5]
    elif mutate == "grid":
        data["ops"][3]["block"]["grid"] = [2, 16]
    elif mutate == "schema":
        data["schema"] = "mugraph.kernel-graph/99"
    elif mutate == "shape":
        data["ops"][0]["shape"] = [2, "256", 64]
    elif mutate == "dtype":
        data["ops"][0]["dtype"] = "int8"
    elif mutate == "misspelt-input-field":
        data["ops"][0]["dtpye"] = data["ops"][0].pop("dtype")  # would load as the default float16
    elif mutate == "misspelt-block-field":
        data["ops"][3]["block"]["for_loop"] = data["ops"][3]["block"]["forloop"]
    else:  # pragma: no cover
        raise AssertionError(mutate)
    return data


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        ("imap-2-ints", "graph.ops[3].block.ops[1].imap: expected a list of 3 integers, got [0, 2]"),
        ("imap-invalid", "graph.ops[3].block.ops[1]: imap [0, 5, -1]: grid axis y maps dim 5, [2,64,4096]"),
        ("unknown-kind", "graph.ops[5].kind: expected one of add, clamp, concat, customized, div, exp,"),
        ("unknown-block-kind", "graph.ops[4].block.ops[2].kind: expected one of accum_mean,"),
        ("input-out-of-range", "graph.ops[5].inputs: tensor 42 does not exist yet (6 defined)"),
        ("arity", "graph.ops[5].inputs: output takes 1 inputs, got 2"),
        ("grid", "graph.ops[3].block.grid: expected a list of 3 integers, got [2, 16]"),
        ("schema", "schema: 'mugraph.kernel-graph/99' is neither 'mugraph.kernel-graph/1' nor"),
        ("shape", 'graph.ops[0].shape: expected a list of integers, got [2, "256", 64]'),
        ("dtype", "graph.ops[0].dtype: unknown dtype 'int8'"),
        (
            "misspelt-input-field",
            "graph.ops[0]: unknown field(s) 'dtpye' (the fields it takes: dtype, kind, name, shape)",
        ),
        (
            "misspelt-block-field",
            "graph.ops[3].block: unknown field(s) 'for_loop' (the fields it takes: block, forloop",
        ),
    ],
)
def test_json_kernel_graph_field_errors(tmp_path: Path, mutate: str, expected: str) -> None:
    path = write(tmp_path, "graph.json", json.dumps(_kernel_json_case(mutate), indent=1))
    msg = load_error(path)
    assert msg.startswith(f"{path}: {expected}"), msg


def test_json_kernel_graph_without_schema_field(tmp_path: Path) -> None:
    data = gqa_json()
    del data["schema"]
    path = write(tmp_path, "noschema.json", json.dumps(data))
    assert load_error(path) == f"{path}: graph.schema: missing (a schema string expected)"


def test_json_top_level_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, "list.json", "[1, 2]")
    assert load_error(path) == f"{path}: graph: expected an object, got list"


def test_json_program_file(tmp_path: Path, good_program: Path) -> None:
    prog = load_program(good_program)
    ref, expert = prog.reference(), prog.experts["fused"]()
    data = {
        "schema": PROGRAM_SCHEMA,
        "name": "tiny_json",
        "preset": "lora",
        "reference": to_json(ref),
        "experts": {"fused": to_json(expert)},
    }
    path = write(tmp_path, "prog.json", json.dumps(data))
    loaded = load_program(path)
    assert (loaded.name, loaded.preset, list(loaded.experts)) == ("tiny_json", "lora", ["fused"])
    assert digest(loaded.reference()) == digest(ref)
    assert digest(loaded.experts["fused"]()) == digest(expert)

    data["experts"] = {"fused": {**to_json(expert), "ops": to_json(expert)["ops"][:2] + [{"kind": "nope"}]}}
    bad = write(tmp_path, "bad_prog.json", json.dumps(data))
    assert load_error(bad).startswith(f"{bad}: experts.fused.ops[2].kind: expected one of ")

    data["experts"] = ["not", "a", "dict"]
    bad = write(tmp_path, "bad_prog2.json", json.dumps(data))
    assert load_error(bad) == f"{bad}: experts: expected an object of label to graph"

    no_reference = write(tmp_path, "noref.json", json.dumps({"schema": PROGRAM_SCHEMA}))
    assert (
        load_error(no_reference)
        == f"{no_reference}: reference: missing (a {PROGRAM_SCHEMA} file holds the reference graph)"
    )


def test_a_misspelt_attribute_or_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    """`epsilon` for an rms_norm's `eps` loaded as eps 0 and passed `check`; of two `experts` keys the
    last one was kept, and the first's experts vanished."""
    g = KernelGraph()
    g.mark_output(g.rms_norm(g.new_input((8, 64), name="X"), 1e-5), "O")
    data = to_json(g)
    norm = next(op for op in data["ops"] if op["kind"] == "rms_norm")
    norm["epsilon"] = norm.pop("eps")
    path = write(tmp_path, "eps.json", json.dumps(data))
    assert "unknown field(s) 'epsilon'" in load_error(path)
    program = {"schema": PROGRAM_SCHEMA, "reference": to_json(g), "experts": {}, "expert": {}}
    assert "unknown field(s) 'expert'" in load_error(write(tmp_path, "p.json", json.dumps(program)))
    text = json.dumps({"schema": PROGRAM_SCHEMA, "reference": to_json(g), "experts": {}})
    twice = write(tmp_path, "twice.json", text[:-1] + ', "experts": {}}')
    assert (
        load_error(twice)
        == f"{twice}: invalid JSON: key 'experts' given twice in one object (the second would replace the first)"
    )


def test_schema_constants() -> None:
    assert SCHEMA == "mugraph.kernel-graph/1" and PROGRAM_SCHEMA == "mugraph.program/1"


# -- CLI -----------------------------------------------------------------------------------------


def _summary(stdout: str) -> dict[str, Any]:
    last = stdout.strip().splitlines()[-1]
    data: dict[str, Any] = json.loads(last)
    return data


def test_cli_check_valid_program_is_equivalent(good_program: Path) -> None:
    proc = run_cli("check", good_program, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = _summary(proc.stdout)
    assert summary["program"] == "tiny_mm"
    assert summary["equivalent"] is True
    assert isinstance(summary["float_max_rel_err"], float) and summary["float_max_rel_err"] < 1e-9
    assert isinstance(summary["seconds"], float) and summary["seconds"] >= 0
    assert [row["expert"] for row in summary["experts"]] == ["fused"]
    assert proc.stderr == ""
    # the digests every other command prints and `emit --digest` takes: canonical ones
    prog = resolve_program(str(good_program))
    assert summary["experts"][0]["digest"] == canonical_digest(prog.experts["fused"]())
    assert summary["reference_digest"] == digest(prog.reference())  # the program digest store names hold


def test_cli_check_show_names_each_digest(good_program: Path) -> None:
    """`--show` heads each graph with its digests, each named: the μGraph digest other commands print
    and the program digest default store names hold are not the same number."""
    proc = run_cli("check", good_program, "--show")
    assert proc.returncode == 0, proc.stderr
    prog = resolve_program(str(good_program))
    ref, fused = prog.reference(), prog.experts["fused"]()
    assert (
        f"reference tiny_mm  μGraph digest {canonical_digest(ref)[:16]}, program digest {digest(ref)[:16]} "
        "(default store names hold it)" in proc.stdout.splitlines()
    )
    assert f"expert fused  μGraph digest {canonical_digest(fused)[:16]}" in proc.stdout.splitlines()


def test_cli_check_non_equivalent_expert_exits_1(tmp_path: Path) -> None:
    path = write(tmp_path, "wrong_mm.py", PROGRAM.format(scale="b.mul_scalar(acc, 2.0)"))
    proc = run_cli("check", path, "--json")
    assert proc.returncode == 1, proc.stderr
    summary = _summary(proc.stdout)
    assert summary["program"] == "tiny_mm" and summary["equivalent"] is False
    assert summary["experts"][0]["equivalent"] is False
    assert "Traceback" not in proc.stderr


def _assert_one_error_line(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mugraph: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_cli_unknown_program_exits_2() -> None:
    _assert_one_error_line(run_cli("check", "nosuch"), "unknown program 'nosuch'")


@pytest.mark.parametrize(
    ("filename", "text", "fragments"),
    [
        pytest.param("bad_shape.py", SHAPE_ERROR_PROGRAM, (":5: matmul: A [4,8]", "B [16,2]"), id="shape"),
        pytest.param("syntax.py", "def f(:\n", (":1: syntax error",), id="syntax"),
        pytest.param("broken.json", "{\n oops\n}", (":2:2: invalid JSON",), id="json"),
        pytest.param("missing.py", None, ("no such file",), id="missing"),
    ],
)
def test_cli_bad_file_exits_2(tmp_path: Path, filename: str, text: str | None, fragments: tuple[str, ...]) -> None:
    path = tmp_path / filename
    if text is not None:
        path.write_text(text, encoding="utf-8")
    line = _assert_one_error_line(run_cli("check", path), *fragments)
    assert str(path) in line


def test_cli_check_validates_a_program_without_experts(tmp_path: Path) -> None:
    """Experts are optional: `check` on a reference-only file loads and evaluates the reference."""
    path = write(tmp_path, "ref_only.json", dumps(lora_reference()))
    proc = run_cli("check", path)
    assert proc.returncode == 0, proc.stderr
    assert "ref_only: reference valid" in proc.stdout and "no experts to check" in proc.stdout
    proc = run_cli("check", path, "--json")
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout.splitlines()[-1])
    assert verdict["reference_only"] is True and verdict["experts"] == []
    assert verdict["reference_digest"] == digest(lora_reference())


def test_cli_error_is_one_line_even_for_multiline_messages(tmp_path: Path) -> None:
    path = write(tmp_path, "multiline.py", "raise RuntimeError('first\\nsecond')\n")
    _assert_one_error_line(run_cli("check", path), "RuntimeError")


def test_cli_main_in_process(capsys: pytest.CaptureFixture[str], good_program: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", "nosuch"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("mugraph: error: unknown program 'nosuch'")
    assert len(captured.err.splitlines()) == 1 and captured.out == ""

    main(["check", str(good_program), "--json", "--seeds", "0"])  # returns normally: status 0
    captured = capsys.readouterr()
    summary = _summary(captured.out)
    assert summary["equivalent"] is True and summary["seeds"] == [0]
    assert captured.err == ""
