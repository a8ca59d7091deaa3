"""A fragment of a split program that is not built in gets the settings its graph would get whole: a
four-input fragment lora widened (`WIDE_FOUR_INPUTS`), where lora's own found nothing for CLIP's
(a·b)·W + bias. Built-in programs' fragments keep their presets' own, and `--preset` drops them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mugraph.pipeline.plan import make_plan
from mugraph.programs import load_program
from mugraph.programs.program import WIDE_FOUR_INPUTS

# relu is a fragment boundary: f0 = relu(X·W1), f1 = (h · Y)·W2 + B reads four inputs
SPLIT = """\
from mugraph.ir import KernelGraph
g = KernelGraph()
x, w1 = g.new_input((16, 64), name="X"), g.new_input((64, 64), name="W1")
y, w2, b = g.new_input((16, 64), name="Y"), g.new_input((64, 32), name="W2"), g.new_input((1, 32), name="B")
h = g.relu(g.matmul(x, w1))
g.mark_output(g.add(g.matmul(g.mul(h, y), w2), b), "O")
reference = g
"""


def wide(config: object) -> bool:
    return all(getattr(config, k) == v for k, v in WIDE_FOUR_INPUTS.items())


def test_a_four_input_fragment_of_a_program_file_is_searched_as_it_would_be_whole(tmp_path: Path) -> None:
    path = tmp_path / "split.py"
    path.write_text(SPLIT)
    prog = load_program(path)
    plan = make_plan(prog, None, {}, 1000)
    inputs = [len(fp.spec.graph.input_signature()) for fp in plan.fragments]
    assert inputs == [2, 4]
    assert [fp.config.preset for fp in plan.fragments] == ["mlp", "lora"]
    assert [wide(fp.config) for fp in plan.fragments] == [False, True]
    assert not any(wide(fp.config) for fp in make_plan(prog, "lora", {}, 1000).fragments)  # --preset: as it is
    assert make_plan(prog, None, {"max_kernel_ops": 7}, 1000).fragments[1].config.max_kernel_ops == 7  # --set wins


def test_a_built_in_programs_fragments_keep_their_presets_own(tmp_path: Path) -> None:
    path = tmp_path / "split.py"
    path.write_text(SPLIT)
    built_in = dataclasses.replace(load_program(path), source="built-in")
    plan = make_plan(built_in, None, {}, 1000)
    assert [fp.config.preset for fp in plan.fragments] == ["mlp", "lora"]
    assert not any(wide(fp.config) for fp in plan.fragments)
