"""Canonical JSON and digests: stable across processes and JSON round trips, sensitive to content."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mugraph.ir import SCHEMA, KernelGraph, digest, dumps, from_json, loads, render, to_json
from tests.helpers.builtin import EXPERTS, PROGRAMS

ALL_GRAPHS = [(n, "reference") for n in PROGRAMS] + EXPERTS


def _build(name: str, label: str) -> KernelGraph:
    prog = PROGRAMS[name]
    return prog.reference() if label == "reference" else prog.experts[label]()


def _digests_here() -> dict[str, str]:
    return {f"{n}/{label}": digest(_build(n, label)) for n, label in ALL_GRAPHS}


def test_digests_are_equal_in_another_process() -> None:
    code = (
        "import json; from mugraph.programs import builtin_programs as b; from mugraph.ir import digest\n"
        "out = {}\n"
        "for n, p in b().items():\n"
        "    out[n + '/reference'] = digest(p.reference())\n"
        "    out.update({n + '/' + k: digest(f()) for k, f in p.experts.items()})\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert json.loads(proc.stdout) == _digests_here()


@pytest.mark.parametrize(("name", "label"), ALL_GRAPHS)
def test_json_round_trip_keeps_digest(name: str, label: str) -> None:
    g = _build(name, label)
    text = dumps(g)
    again = loads(text)
    assert dumps(again) == text
    assert digest(again) == digest(g)
    assert json.loads(text)["schema"] == SCHEMA


def test_enums_are_strings() -> None:
    text = dumps(PROGRAMS["gqa"].experts["expert"]())
    data = json.loads(text)
    kinds = [op["kind"] for op in data["ops"]]
    assert all(isinstance(k, str) for k in kinds)
    assert '"kind":"accum_redtox"' in text and '"dtype":"float16"' in text


def test_digest_changes_with_any_attribute() -> None:
    g = PROGRAMS["lora"].experts["saved"]()
    base = to_json(g)
    changed = json.loads(json.dumps(base))
    changed["ops"][4]["block"]["grid"] = [128, 1, 1]
    assert digest(from_json(changed)) != digest(g)
    renamed = json.loads(json.dumps(base))
    renamed["ops"][0]["name"] = "X2"
    assert digest(from_json(renamed)) != digest(g)


def test_render_shows_maps_and_accumulation() -> None:
    text = render(PROGRAMS["gqa"].experts["expert"](), "gqa")
    assert "imap=(0,2,-1)" in text and "fmap=2" in text and "omap=(0,2,1)" in text
    assert "accum_redtox(s0)  [1,16,64] *" in text
    assert "grid=(2,16,4)" in text and "forloop=4" in text
