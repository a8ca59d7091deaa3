"""A reference with erf-GELU searches with `gelu_erf` wherever the preset lists the tanh form, in a
config a worker accepts back from its JSON; other references keep the preset's lists and digest."""

from __future__ import annotations

import json

import pytest

from mugraph.ir.types import OpKind
from mugraph.pipeline.plan import FragmentPayload
from mugraph.stages.search.config import PRESETS, for_reference, preset_config


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(
    "kinds, want",
    [
        ({OpKind.GELU_ERF, OpKind.MATMUL}, [OpKind.GELU_ERF]),
        ({OpKind.GELU_ERF, OpKind.GELU}, [OpKind.GELU, OpKind.GELU_ERF]),
    ],
    ids=["erf-only", "both-forms"],
)
def test_erf_gelu_is_listed_where_tanh_gelu_is(preset: str, kinds: set[OpKind], want: list[OpKind]) -> None:
    base = preset_config(preset)
    cfg = for_reference(base, kinds)
    for ops, base_ops in ((cfg.kernel_ops, base.kernel_ops), (cfg.block_ops, base.block_ops)):
        at = base_ops.index(OpKind.GELU)
        assert list(ops[at : at + len(want)]) == want
        assert [k for k in ops if k not in (OpKind.GELU, OpKind.GELU_ERF)] == [
            k for k in base_ops if k is not OpKind.GELU
        ]
    payload = FragmentPayload(0, "f0", "-", "{}", json.dumps(cfg.to_json()))
    assert payload.search_config() == cfg  # what a worker rebuilds from the payload


def test_other_references_keep_the_presets_config() -> None:
    base = preset_config("mlp")
    assert for_reference(base, {OpKind.GELU, OpKind.MATMUL}) is base
    assert for_reference(base, {OpKind.EXP}).digest == base.digest
