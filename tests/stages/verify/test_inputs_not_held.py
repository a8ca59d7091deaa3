"""Inputs too large to hold are drawn again at each use: the verdicts are those of held inputs, and
only one seed's inputs are alive at a time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps, from_json
from mugraph.pipeline.plan import FragmentPayload
from mugraph.pipeline.worker import WorkerState
from mugraph.programs.benchmarks import gated_mlp_reference, lora_expert_saved, lora_reference, rms_norm_reference
from mugraph.stages.verify import confirm
from mugraph.stages.verify.check import FloatReference, ReferenceFingerprints, input_bytes
from mugraph.stages.verify.confirm import Confirmer, Verdict, held_bytes, holds_inputs
from tests.helpers.mutants import mutants


def _mutants() -> list[KernelGraph]:
    out = []
    for _, _, data in mutants(lora_expert_saved()):
        try:
            out.append(from_json(data))
        except MugraphError:
            continue  # refused by the IR
    return out


def _plain(v: Verdict) -> dict[str, object]:
    return {k: x for k, x in v.items() if k != "seconds"}


def test_the_built_in_programs_hold_a_7b_mlp_does_not() -> None:
    assert holds_inputs(rms_norm_reference()) and holds_inputs(gated_mlp_reference())
    g = KernelGraph()
    x, wg, wu = g.new_input((64, 4096), name="X"), g.new_input((4096, 11008), name="G"), g.new_input((4096, 11008))
    g.mark_output(g.matmul(g.mul(g.silu(g.matmul(x, wg)), g.matmul(x, wu)), g.new_input((11008, 4096))), "O")
    assert input_bytes(g) == 8 * (64 * 4096 + 3 * 4096 * 11008) and not holds_inputs(g)


def test_confirm_verdicts_are_those_of_held_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    candidates = [lora_expert_saved(), lora_reference(), *_mutants()]
    held = Confirmer(lora_reference(), "lora")
    assert held.fingerprints.cases[0].held is not None and held.floats.held is not None
    monkeypatch.setattr(confirm, "HOLD_INPUT_BYTES", 0)
    drawn = Confirmer(lora_reference(), "lora")
    assert drawn.fingerprints.cases[0].held is None and drawn.floats.held is None
    verdicts = [(_plain(held.confirm(g)), _plain(drawn.confirm(g))) for g in candidates]
    assert all(a == b for a, b in verdicts)
    assert {a["equivalent"] for a, _ in verdicts} == {True, False}  # both kinds of verdict were met


def test_search_matches_are_those_of_held_inputs() -> None:
    ref = lora_reference()
    held, drawn = ReferenceFingerprints(ref, (0, 1)), ReferenceFingerprints(ref, (0, 1), hold_inputs=False)
    assert [c.omega for c in held.cases] == [c.omega for c in drawn.cases]
    for a, b in zip(held.outputs, drawn.outputs, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    for g in [lora_expert_saved(), *_mutants()]:
        assert held.match(g) == drawn.match(g)
        assert held.match_named(g)[1] == drawn.match_named(g)[1]
    f_held, f_drawn = FloatReference(ref, np), FloatReference(ref, np, hold_inputs=False)
    assert f_held.rel_errs(lora_expert_saved(), (0,)) == f_drawn.rel_errs(lora_expert_saved(), (0,))


# VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's resident size (pytest's, here)
PEAK = """
import json, sys
from mugraph.ir.graph import KernelGraph
from mugraph.stages.verify import confirm
def status(key):
    return next(int(s.split()[1]) * 1024 for s in open("/proc/self/status") if s.startswith(key + ":"))
g = KernelGraph()
x, w = g.new_input((8, 1024), name="X"), g.new_input((1024, 8192), name="W")
g.mark_output(g.matmul(x, w), "O")
confirm.HOLD_INPUT_BYTES = int(sys.argv[1])
before = status("VmHWM")
verdict = confirm.Confirmer(g, "peak").confirm(g)
print(json.dumps([status("VmHWM") - before, verdict["equivalent"]]))
"""


def _peak(hold_bytes: int) -> tuple[int, bool]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PEAK), str(hold_bytes)], capture_output=True, text=True, check=True
    )
    grown, ok = json.loads(out.stdout)
    return int(grown), bool(ok)


def test_one_seed_alive_at_a_time() -> None:
    """A fragment whose inputs take 64 MiB a seed: confirming it grows a fresh process by four seeds'
    worth where held, by about one where drawn again (the bound leaves room for the evaluation)."""
    seed = 8 * (8 * 1024 + 1024 * 8192)
    held, ok_held = _peak(1 << 40)
    drawn, ok_drawn = _peak(0)
    assert ok_held and ok_drawn
    assert held > 3.5 * seed and drawn < 1.6 * seed, (held / seed, drawn / seed)


def test_a_worker_holds_its_confirmers_inputs_under_one_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fragments' Confirmers in one worker: the second holds its inputs only where both fit."""
    lora, mlp = lora_reference(), KernelGraph()
    x = mlp.new_input((8, 256), name="X")
    mlp.mark_output(mlp.matmul(x, mlp.new_input((256, 512), name="W")), "O")
    payloads = [FragmentPayload(i, f"f{i}", f"d{i}", dumps(g), "{}") for i, g in enumerate((lora, mlp))]
    for budget, second_holds in ((held_bytes(lora) + held_bytes(mlp), True), (held_bytes(lora), False)):
        monkeypatch.setattr(confirm, "HOLD_INPUT_BYTES", budget)
        state = WorkerState(None, "numpy")
        first, second = (state.confirmer(p) for p in payloads)
        assert first.holds and second.holds is second_holds
        assert second.confirm(mlp)["equivalent"]
