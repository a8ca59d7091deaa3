"""Search limits narrow enough for the default suite that still keep an expert reachable (each of
rms_norm's, gated_mlp's and gqa's; lora's `saved`, not its `concat`, whose grid has 128 blocks):
Mirage's preset with the grid (and, where it matters, imaps, for-loop ranges and kernel ops)
restricted to the expert's choices plus a few others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NARROW: dict[str, dict[str, Any]] = {
    "rms_norm": {"grids": [[64, 1, 1]], "franges": [64], "kernel_ops": [], "imaps": [[-1, -1, -1], [1, -1, -1]]},
    "lora": {"grids": [[64, 1, 1]], "fmaps": [-1], "kernel_ops": [], "imaps": [[-1, -1, -1], [1, -1, -1]]},
    "gated_mlp": {"grids": [[64, 1, 1]], "franges": [64], "kernel_ops": [], "imaps": [[-1, -1, -1], [1, -1, -1]]},
    "gqa": {"grids": [[2, 16, 4], [2, 16, 1]], "kernel_ops": []},
}

# Per preset, the overrides that give the default space as it was before for-loop range 32 and
# the (batch, 8, 16) attention grid were added (for side-by-side benchmarks against older trees).
OLD_SPACE: dict[str, list[str]] = {
    "mlp": ["franges=[4,16,64]"],
    "lora": ["franges=[4,16,64]"],
    "attention": ["attention_yz=[[16,4]]"],
}


def old_space_settings(tree: Path, program: str) -> list[str]:
    """The `--set` values that give `program` its pre-widening space on the source tree at `tree`
    (with Mirage's block-input rule where the tree has another); none for a tree older than the
    widening (it searches that space by default)."""
    text = (tree / "mugraph/stages/search/config.py").read_text()
    widened = OLD_SPACE[PRESET[program]] if "attention_yz" in text else []
    return widened + (["block_inputs=mirage"] if "block_inputs" in text else [])


PRESET = {"rms_norm": "mlp", "lora": "lora", "gated_mlp": "mlp", "gqa": "attention"}


# What the narrowed searches found when recorded (tests/stages/search/data/narrow_results.json): per
# program, its overrides and the μGraphs, which the regression and counting tests compare against.
NARROW_RESULTS: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parents[1] / "stages" / "search" / "data" / "narrow_results.json").read_text()
)
