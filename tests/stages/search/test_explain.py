"""`explain`: an expert outside the space is excluded by a named rule, with the setting that admits
it; one inside is found at the path the search itself reaches it by."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mugraph.ir import BlockGraph, KernelGraph
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.serialize import from_json, to_json
from mugraph.pipeline.plan import program_config
from mugraph.programs import get_builtin
from mugraph.programs.loader import load_program
from mugraph.run.expert import as_found
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explain import explain_expert
from mugraph.stages.search.explanation import Explanation
from mugraph.stages.search.explore import Fragment, Searcher
from tests.helpers.builtin import reference
from tests.helpers.cli_json import run, summary
from tests.helpers.narrow import NARROW


def explain(name: str, label: str = "", **extra: Any) -> Explanation:
    prog = get_builtin(name)
    cfg = preset_config(prog.preset).with_overrides({**NARROW[name], **extra})
    label = label or next(iter(prog.experts))
    return explain_expert(Searcher(Fragment(reference(name), cfg, name)), label, prog.experts[label]())


def admitted(name: str, e: Explanation, **extra: Any) -> Explanation:
    """Explain again with the suggested setting applied on top of `extra`."""
    assert e.setting is not None
    key, _, value = e.setting.partition("=")
    return explain(name, e.expert, **{**extra, key: json.loads(value)})


@pytest.mark.parametrize(
    ("name", "extra", "rule", "words"),
    [
        ("rms_norm", {"grids": [[128, 1, 1]]}, "grid", "grid [64, 1, 1] is not a candidate"),
        ("rms_norm", {"franges": [16]}, "for-loop range", "for-loop range 64 is not among the ranges [16]"),
        (
            "lora",
            {"four_input_blocks": False},
            "block inputs",
            "reads X, W, A, B, but a new block graph here reads A, B",
        ),
        ("rms_norm", {"max_block_ops": 5}, "op count", "6 block ops counting its inputs, max_block_ops is 5"),
        ("rms_norm", {"max_kernel_ops": 2}, "op count", "3 kernel ops counting its inputs, max_kernel_ops is 2"),
        ("rms_norm", {"imaps": [[-1, -1, -1]]}, "imaps", "imap [1, -1, -1] is not among the imaps"),
        ("rms_norm", {"block_ops": ["matmul", "div", "accum_no_red"]}, "block ops", "accum_rms is not among"),
        ("rms_norm", {"omaps": [[0, 1, -1]]}, "omaps", "omap [1, -1, -1] is not a candidate"),
    ],
)
def test_an_excluded_expert_names_its_rule_and_the_setting_that_admits_it(
    name: str, extra: dict[str, Any], rule: str, words: str
) -> None:
    e = explain(name, **extra)
    assert not e.inside and e.rule == rule and words in e.reason, e.line()
    assert e.line().startswith(f"outside the space ({rule}): ")
    if e.setting is not None:  # the suggested setting really admits the expert
        again = admitted(name, e, **extra)
        assert again.inside, again.line()


def test_the_excluding_choice_is_the_deepest_the_expert_reaches() -> None:
    """With too few block ops, the walk gets through the expert's grid, loop and first ops."""
    e = explain("rms_norm", max_block_ops=5)
    assert e.labels[:2] == ["open(grid=[64, 1, 1],imaps=[[-1, -1, -1], [1, -1, -1]])", "loop(fmaps=[1, 0],F=64)"]
    assert len(e.labels) == 5  # the input ops plus three computed ones: the fourth does not fit


def test_an_oracle_verdict_is_named() -> None:
    """lora's concat expert, in a space narrowed to its own choices: its concat-matmul's term is
    undecided within the rlimit, and unknowns are pruned."""
    extra = {"grids": [[128, 1, 1]], "fmaps": [-1, 0, 1], "kernel_ops": [], "franges": [2], "oracle": "z3"}
    e = explain("lora", "concat", **extra)
    assert e.rule == "oracle verdict" and "concat_matmul(0,4,1,3)" in e.reason and e.setting == "unknown_keeps=true"
    assert admitted("lora", e, **extra).inside


@pytest.mark.parametrize("name", ["rms_norm", "lora", "gated_mlp"])
def test_an_inside_expert_is_found_at_the_root_choice_the_search_finds_it(name: str) -> None:
    e = explain(name)
    assert e.inside and e.root_choice is not None
    assert e.line().startswith(f"inside the space, at root choice {e.root_choice} ")
    s = Searcher(Fragment(reference(name), preset_config(get_builtin(name).preset).with_overrides(NARROW[name])))
    found = s.explore(())
    want = canonical_digest(next(iter(get_builtin(name).experts.values()))())
    assert found.found[want].path == e.path
    assert s.describe(e.path) == e.labels


def test_explain_command_and_the_reason_search_prints(tmp_path: Path) -> None:
    proc = run(
        "explain", "rms_norm", "--set", "franges=[16]", "--set", "grids=[[64,1,1]]", "--memo-url", "local", cwd=tmp_path
    )
    assert "rms_norm [expert]: outside the space (for-loop range)" in proc.stdout
    assert "rms_norm [paper]: outside the space (grid)" in proc.stdout
    args = ["--set", "grids=[[64,1,1]]", "--set", "kernel_ops=[]", "--set", "franges=[16]", "--memo-url", "local"]
    s = summary(run("search", "rms_norm", *args, "--json", cwd=tmp_path))
    assert s["expert_found"] is False and "for-loop range 64 is not among the ranges [16]" in s["expert_reason"]
    text = run("search", "rms_norm", *args, cwd=tmp_path).stdout
    assert "expert 'expert' NOT found: outside the space (for-loop range)" in text


def test_optimize_says_why_its_expert_was_not_found(tmp_path: Path) -> None:
    from tests.helpers.cli_runs import done, mugraph, optimize_args

    args = optimize_args(
        "rms_norm", tmp_path / "run.zarr", "--workers", "1", "--memo-url", "local", "--set", "franges=[16]"
    )
    last = done(mugraph(*args, cwd=tmp_path))
    assert last["complete"]
    assert last["expert"].startswith("expert 'expert' NOT found: outside the space (for-loop range)")
    assert "--set 'franges=[16,64]' would admit it" in last["expert"]


def _batched() -> tuple[Any, Any]:
    """O = A·B + C over a batch of 3, and an expert on a grid [3, 2, 1], which no grid divisor makes
    (only [batch, 1, 1] and [d / divisor, 1, 1] grids are derived)."""
    from mugraph.ir.graph import BlockGraph, KernelGraph

    def inputs() -> tuple[KernelGraph, Any, Any, Any]:
        g = KernelGraph()
        shapes = (("A", (3, 96, 80)), ("B", (3, 80, 48)), ("C", (3, 96, 48)))
        a, b, c = (g.new_input(s, name=n) for n, s in shapes)
        return g, a, b, c

    g, a, b, c = inputs()
    g.mark_output(g.add(g.matmul(a, b), c), "O")
    e, a, b, c = inputs()
    bg = BlockGraph(grid=(3, 2, 1), forloop=1)
    ta, tb, tc = bg.new_input(a, (0, 1, -1), -1), bg.new_input(b, (0, -1, -1), -1), bg.new_input(c, (0, 1, -1), -1)
    bg.new_output(bg.accum_no_red(bg.add(bg.matmul(ta, tb), tc)), (0, 1, -1))
    e.mark_output(e.customized(bg)[0], "O")
    return g, e


@pytest.mark.parametrize("extra", [{}, {"min_blocks": 8}, {"grid_divisors": [8, 16]}])
def test_a_grid_no_bound_admits_is_suggested_as_grids_that_do(extra: dict[str, Any]) -> None:
    reference_graph, expert = _batched()

    def explained(more: dict[str, Any]) -> Explanation:
        cfg = preset_config("mlp").with_overrides({**extra, **more})
        return explain_expert(Searcher(Fragment(reference_graph, cfg, "batched")), "per_batch", expert)

    e = explained({})
    assert e.rule == "grid" and e.setting is not None and e.setting.startswith("grids="), e.line()
    key, _, value = e.setting.partition("=")
    assert [3, 2, 1] in json.loads(value) and [3, 1, 1] in json.loads(value)  # a superset here
    assert explained({key: json.loads(value)}).inside


SPLITS = """
from mugraph.ir import BlockGraph, KernelGraph


def _inputs():
    g = KernelGraph()
    return g, g.new_input((16, 256), name="X"), g.new_input((256, 512), name="W1"), g.new_input((512, 256), name="W2")


def reference():
    g, x, w1, w2 = _inputs()
    g.mark_output(g.matmul(g.gelu(g.matmul(x, w1)), w2), "Y")
    return g


def fused_up():
    g, x_d, w1_d, w2_d = _inputs()
    b = BlockGraph(grid=(8, 1, 1), forloop=4)
    x = b.new_input(x_d, imap=(-1, -1, -1), fmap=1)
    w = b.new_input(w1_d, imap=(1, -1, -1), fmap=0)
    b.new_output(b.gelu(b.accum_no_red(b.matmul(x, w))), omap=(1, -1, -1))
    g.mark_output(g.matmul(g.customized(b)[0], w2_d), "Y")
    return g


experts = {"fused_up": fused_up}
"""


def test_an_expert_of_a_program_that_splits_is_said_not_looked_for(tmp_path: Path) -> None:
    """optimize searches each fragment alone, so it cannot find an expert of the whole program: it says
    so, and `explain` says that what it explains is a search optimize does not run."""
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import resolve_program
    from mugraph.run.expert import expert_line
    from mugraph.stages.search.serial import DEFAULT_BUDGET

    path = tmp_path / "mlp.py"
    path.write_text(SPLITS)
    prog = resolve_program(str(path))
    plan = make_plan(prog, None, {}, DEFAULT_BUDGET)
    fragments = [(fp.payload.reference, fp.config) for fp in plan.fragments]
    assert len(fragments) == 2
    line = expert_line(prog, fragments, set())
    assert line is not None and line.startswith("expert 'fused_up' not looked for: the program splits into 2")
    proc = run("explain", "mlp.py", "--set", "min_blocks=8", "--memo-url", "local", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()[:2]
    assert first.startswith("note: the program splits into 2 fragments") and second.startswith("mlp [fused_up]: ")


def test_a_block_output_the_block_also_reads_is_named_so() -> None:
    """The search makes exactly the unread block tensors outputs: an expert that outputs a tensor its
    block graph also reads (a gated MLP that returns X·W2 beside the product) is told that, not that
    it leaves a tensor unused."""
    from mugraph.ir.graph import BlockGraph, KernelGraph

    def inputs() -> tuple[KernelGraph, Any, Any, Any]:
        g = KernelGraph()
        return (
            g,
            g.new_input((8, 512), name="X"),
            g.new_input((512, 512), name="W1"),
            g.new_input((512, 512), name="W2"),
        )

    g, x, w1, w2 = inputs()
    u = g.matmul(x, w2)
    g.mark_output(g.mul(g.silu(g.matmul(x, w1)), u), "O")
    g.mark_output(u, "U")
    e, xd, w1d, w2d = inputs()
    b = BlockGraph(grid=(8, 1, 1), forloop=8)
    bx = b.new_input(xd, imap=(-1, -1, -1), fmap=1)
    a1 = b.accum_no_red(b.matmul(bx, b.new_input(w1d, imap=(1, -1, -1), fmap=0)))
    a2 = b.accum_no_red(b.matmul(bx, b.new_input(w2d, imap=(1, -1, -1), fmap=0)))
    b.new_output(b.mul(b.silu(a1), a2), omap=(1, -1, -1))
    b.new_output(a2, omap=(1, -1, -1))
    o, uu = e.customized(b)
    e.mark_output(o, "O")
    e.mark_output(uu, "U")
    cfg = preset_config("mlp").with_overrides({"grids": [[8, 1, 1]], "franges": [8]})
    why = explain_expert(Searcher(Fragment(g, cfg, "gated2")), "two_outputs", as_found(g, e))
    assert why.rule == "block outputs" and "outputs a tensor that it also reads" in why.reason, why.line()


def test_mirages_rule_on_a_program_of_one_input_is_named_with_the_setting_that_admits_it() -> None:
    prog = load_program(Path(__file__).parents[2] / "programs" / "files" / "one_input_norm.py")
    expert = as_found(prog.reference(), prog.experts["fused"]())
    for rule, inside in (("mirage", False), ("subsets", True)):
        cfg = program_config(prog, None, {"block_inputs": rule})
        e = explain_expert(Searcher(Fragment(prog.reference(), cfg, prog.name)), "fused", expert)
        assert e.inside is inside, e.line()
        if not inside:
            assert e.rule == "block inputs" and e.setting == "block_inputs=subsets", e.line()
            assert "in a program of one input, none" in e.reason


def test_a_block_op_the_search_cannot_enumerate_gets_no_setting() -> None:
    """A block mul_scalar (its scalar is not the search's to choose): `--set block_ops=[...]` naming it
    is refused by the config, so it is not offered."""
    g = KernelGraph()
    x, w = g.new_input((64, 32), name="X"), g.new_input((32, 64), name="W")
    g.mark_output(g.mul_scalar(g.matmul(x, w), 0.125), "O")
    e = KernelGraph()
    x_d, w_d = e.new_input((64, 32), name="X"), e.new_input((32, 64), name="W")
    b = BlockGraph(grid=(16, 1, 1), forloop=1)
    xb, wb = b.new_input(x_d, (0, -1, -1)), b.new_input(w_d, (-1, -1, -1))
    b.new_output(b.accum_no_red(b.mul_scalar(b.matmul(xb, wb), 0.125)), (0, -1, -1))
    e.mark_output(e.customized(b)[0], "O")
    cfg = preset_config("mlp").with_overrides({"grids": [[16, 1, 1]]})
    why = explain_expert(Searcher(Fragment(g, cfg, "scaled")), "scaled", as_found(g, e))
    assert why.rule == "block ops" and why.setting is None, why.line()
    assert "cannot enumerate mul_scalar ops in a block graph" in why.reason


def test_a_setting_that_only_gets_past_one_rule_is_not_offered() -> None:
    """RMSNorm written out (square, sum, a scale, sqrt, div) against an expert calling rms_norm: adding
    rms_norm to kernel_ops gets the walk past its rule, but the oracle then prunes the step (its term
    is not one the reference computes), so `--set` would not admit it: said, not offered."""
    g = KernelGraph()
    x = g.new_input((64, 256), name="X")
    g.mark_output(g.div(x, g.sqrt(g.mul_scalar(g.reduction(g.square(x), 1), 1 / 256))), "O")
    e = KernelGraph()
    e.mark_output(e.rms_norm(e.new_input((64, 256), name="X")), "O")
    cfg = preset_config("mlp")
    why = explain_expert(Searcher(Fragment(g, cfg, "rms_written")), "as_op", as_found(g, e))
    assert why.rule == "kernel ops" and why.setting is None, why.line()
    assert "gets past this, but then the oracle prunes step rms_norm(0)" in why.reason


def test_an_expert_of_another_reduction_dimx_is_named_with_the_rdx_that_admits_it() -> None:
    """Mirage's chameleon-7b μGraph reduces with rdx 128, the search's block graphs have 64: the walk
    would reach the oracle (or the candidate check) with another graph and blame those."""
    data = to_json(get_builtin("rms_norm").experts["expert"]())
    for op in data["ops"]:
        if "block" in op:
            op["block"]["rdx"] = 128
    expert = from_json(data)
    name = "rms_norm"
    prog = get_builtin(name)
    for extra, inside in (({}, False), ({"rdx": 128}, True)):
        cfg = preset_config(prog.preset).with_overrides({**NARROW[name], **extra})
        e = explain_expert(Searcher(Fragment(reference(name), cfg, name)), "expert", expert)
        assert e.inside is inside, e.line()
        if not inside:
            assert e.rule == "rdx" and e.setting == "rdx=128", e.line()
            assert "reduction_dimx 128; every block graph the search makes has rdx 64" in e.reason
    # two block graphs of two rdx: no one setting admits it, none is offered
    g = KernelGraph()
    x = g.new_input((16, 256), name="X")
    g.mark_output(g.exp(g.exp(x)), "O")
    e2 = KernelGraph()
    t = e2.new_input((16, 256), name="X")
    for rdx in (64, 128):
        b = BlockGraph(grid=(16, 1, 1), forloop=1, rdx=rdx)
        b.new_output(b.accum_no_red(b.exp(b.new_input(t, (0, -1, -1)))), (0, -1, -1))
        t = e2.customized(b)[0]
    e2.mark_output(t, "O")
    for rdx in (64, 128):
        cfg = preset_config("mlp").with_overrides({"rdx": rdx})
        why = explain_expert(Searcher(Fragment(g, cfg, "two")), "two", as_found(g, e2))
        assert why.rule == "rdx" and why.setting is None, why.line()
        assert "block graphs have reduction_dimx 64, 128" in why.reason
