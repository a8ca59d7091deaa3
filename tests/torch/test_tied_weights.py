"""A weight tied in the model (a language model's embedding and output head: `head.weight = emb.weight`)
is one parameter of the optimised module too, through every way a module is made again: `mugraph.load`,
pickle, torch.save and torch.load, copy.deepcopy. An edit in place then reaches both uses, as in the model."""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mugraph
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS

OPTIONS: dict[str, Any] = {"workers": 1, "settings": GELU_LINEAR_SETTINGS, "dashboard_address": None, "verbose": False}


class TiedLM(nn.Module):
    """Embedding, a GELU layer (searched), and an output head sharing the embedding's weight."""

    def __init__(self, vocab: int = 64, dim: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.fc = nn.Linear(dim, dim, bias=False)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(F.gelu(self.fc(self.emb(ids))))
        return out


@pytest.fixture(scope="module")
def optimised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TiedLM, OptimizedModule, torch.Tensor]]:
    torch.manual_seed(0)
    model, ids = TiedLM().eval(), torch.randint(0, 64, (16,))
    store = tmp_path_factory.mktemp("tied") / "s.zarr"
    fast = mugraph.optimize(model, ids, store=store, **OPTIONS)
    assert fast.verdict.self_check is None and any(not f.kept_reference for f in fast.verdict.fragments)
    yield model, fast, ids


def _torch_saved(m: OptimizedModule) -> OptimizedModule:
    buffer = io.BytesIO()
    torch.save(m, buffer)
    buffer.seek(0)
    again: OptimizedModule = torch.load(buffer, weights_only=False)
    return again


MADE_AGAIN: dict[str, Callable[[OptimizedModule], OptimizedModule]] = {
    "optimize": lambda m: m,
    "load": lambda m: mugraph.load(Path(m.verdict.store)),
    "pickle": lambda m: pickle.loads(pickle.dumps(m)),
    "torch.save": _torch_saved,
    "deepcopy": copy.deepcopy,
}


@pytest.mark.parametrize("way", list(MADE_AGAIN))
def test_a_tied_weight_stays_one_parameter_and_an_edit_reaches_both_uses(
    optimised: tuple[TiedLM, OptimizedModule, torch.Tensor], way: str
) -> None:
    model, fast, ids = optimised
    module = MADE_AGAIN[way](fast)
    held = dict(module.named_parameters(remove_duplicate=False))
    assert held["head.weight"] is held["emb.weight"]
    assert len(list(module.parameters())) == len(list(model.parameters())) == 2
    reference = copy.deepcopy(model)  # the model, with the module's weights (mugraph.load has the store's)
    reference.load_state_dict(module.state_dict())
    before = module(ids)
    with torch.no_grad():
        for m in (module, reference):  # an edit through the head's name: the embedding sees it too
            dict(m.named_parameters(remove_duplicate=False))["head.weight"].mul_(-2.0)
    after, want = module(ids), reference(ids)
    assert not torch.allclose(after, before, atol=1e-2)
    assert torch.allclose(after, want, atol=1e-4), (after - want).abs().max()
    if way == "optimize":  # it shares the model's parameters: undo the edit for the other cases
        with torch.no_grad():
            held["emb.weight"].div_(-2.0)
