"""The fragments priced together, on real runs: a model of two fragments split by a softmax (glue), one
replaced by a μGraph and one keeping its reference (a lone LayerNorm), and a model of one fragment.
The figure is checked against the seconds the store holds per fragment, summed here apart from the
code under test, and must read the same in the verdict, the run's printed summary, `show` and the
report; a one-fragment program gives no such line (its fragment's own figure says it)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from torch import nn

import mugraph
from mugraph.cli import show as cli_show
from mugraph.dashboards.report import write_report
from mugraph.storage.run.backends import open_existing
from mugraph.torch.capture import capture
from mugraph.torch.runtime import OptimizedModule
from mugraph.torch.verdict import FragmentVerdict, Verdict, glue_ops
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS, GeluLinear, build, inputs


class GeluThenNorm(nn.Module):
    """gelu(x W) (a μGraph fuses it), softmax (glue), then a LayerNorm alone (keeps its reference)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)
        self.norm = nn.LayerNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(torch.softmax(F.gelu(self.fc(x)), dim=-1))
        return out


def _optimize(model: nn.Module, x: tuple[torch.Tensor, ...], store: Path) -> tuple[OptimizedModule, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        fast = mugraph.optimize(
            model, x, store=store, workers=1, settings=GELU_LINEAR_SETTINGS, dashboard_address=None, verbose=True
        )
    return fast, err.getvalue()


def _stored_sums(store: Path) -> tuple[float, float, int]:
    """The references' seconds and the chosen rows' seconds, summed from the store's rankings."""
    with open_existing(store, readonly=True) as st:
        final = st.final()
        assert final is not None
        reference = chosen = 0.0
        frags = st.fragments()
        for i, f in enumerate(frags):
            rows = list(st.ranking(i) or [])
            ref = next(r for r in rows if r.get("reference"))
            pick = final["best_per_fragment"][f["name"]]
            reference += ref["estimated_seconds"]
            chosen += ref["estimated_seconds"] if pick == ref["digest"] else rows[0]["estimated_seconds"]
            assert pick in (ref["digest"], rows[0]["digest"])
    return reference, chosen, len(frags)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[OptimizedModule, str, Path]:
    store = tmp_path_factory.mktemp("together") / "two.zarr"
    fast, printed = _optimize(build(GeluThenNorm), inputs((16, 32)), store)
    return fast, printed, store


def test_the_verdict_sums_the_fragments_the_store_holds(two: tuple[OptimizedModule, str, Path]) -> None:
    fast, _, store = two
    reference, chosen, n = _stored_sums(store)
    kinds = [f.kept_reference for f in fast.verdict.fragments]
    assert n == 2 and sorted(kinds) == [False, True]  # one μGraph, one reference kept: both sides counted
    figure = fast.verdict.together
    assert figure is not None and figure.fragments == 2
    assert figure.reference_seconds == pytest.approx(reference, rel=1e-9)
    assert figure.chosen_seconds == pytest.approx(chosen, rel=1e-9)
    assert figure.speedup == pytest.approx(reference / chosen, rel=1e-9)
    # below the replaced fragment's own speedup: the kept reference weighs on the whole
    replaced = next(f for f in fast.verdict.fragments if not f.kept_reference)
    assert 1.0 < figure.speedup < replaced.speedup


def test_every_reader_gives_the_same_figure(two: tuple[OptimizedModule, str, Path]) -> None:
    fast, printed, store = two
    reference, chosen, _ = _stored_sums(store)
    figure = f"{reference * 1e6:,.1f} μs → {chosen * 1e6:,.1f} μs, estimated {reference / chosen:.2f}x"
    assert fast.verdict.summary().endswith(f"; together {reference / chosen:.2f}x")  # the module's repr
    assert f"; together {reference / chosen:.2f}x" in repr(fast)
    described = [line.strip() for line in fast.describe().splitlines() if "fragments together" in line]
    assert described == [f"fragments together: {figure}; not priced: glue run by PyTorch (softmax)"]  # named
    said = [line.strip() for line in printed.splitlines() if "fragments together" in line]
    assert said == described  # once, not twice, naming the glue as the verdict does
    shown = CliRunner().invoke(cli_show.show, [str(store)])
    assert shown.exit_code == 0, shown.output
    assert f"fragments together: {figure}; not priced: any glue run by PyTorch" in shown.output.splitlines()
    page = write_report(store, store.parent / "again.report.html").read_text()
    assert f"fragments together: {figure}; not priced: any glue run by PyTorch" in page


def test_one_fragment_gives_no_figure_for_the_whole(tmp_path: Path) -> None:
    store = tmp_path / "one.zarr"
    fast, printed = _optimize(build(GeluLinear), inputs((16, 32)), store)
    assert len(fast.verdict.fragments) == 1 and fast.verdict.together is None
    assert "together" not in fast.describe() and "together" not in printed and "together" not in repr(fast)
    shown = CliRunner().invoke(cli_show.show, [str(store)])
    assert shown.exit_code == 0 and "together" not in shown.output
    assert "fragments together" not in write_report(store, tmp_path / "one.report.html").read_text()


def test_glue_named_where_the_verdict_knows_it() -> None:
    captured = capture(build(GeluThenNorm), inputs((16, 32)))
    glue = glue_ops(captured)
    assert len(glue) == len(captured.lowering.glue) and "softmax" in glue
    kept = FragmentVerdict("f1", "reference", 1.0, 1, 2e-6, 1, "no μGraph found is estimated faster")
    frags = (FragmentVerdict("f0", "a" * 64, 3.0, 1, 1e-6, 1), kept)
    verdict = Verdict("m", True, False, frags, (), "s.zarr", None, "H100", glue=glue)
    line = verdict.together_line()
    assert line is not None and line.endswith(f"; not priced: glue run by PyTorch ({', '.join(glue)})")
    assert f"{(3.0 * 1e-6 + 2e-6) / (1e-6 + 2e-6):.2f}x" in line


def test_a_fragment_of_no_kernel_counts_its_reference_in_the_figure() -> None:
    """A μGraph of no kernel (its outputs are its inputs) is estimated at 0 s, its speedup stored as 0:
    the reference's time the run gave still counts, and the repr says "no kernel", not "0.00x"."""
    empty = FragmentVerdict("f0", "b" * 64, 0.0, 0, 0.0, 1, reference_estimate=3e-6)
    fused = FragmentVerdict("f1", "a" * 64, 2.0, 1, 2e-6, 1, reference_estimate=4e-6)
    verdict = Verdict("m", True, False, (empty, fused), (), "s.zarr", None, "H100")
    figure = verdict.together
    assert figure is not None and figure.reference_seconds == pytest.approx(7e-6)
    assert figure.chosen_seconds == pytest.approx(2e-6) and figure.speedup == pytest.approx(3.5)
    assert verdict.summary() == "f0 no kernel, f1 2.00x; together 3.50x"
    unknown = FragmentVerdict("f0", "b" * 64, 0.0, 0, 0.0, 1)  # a verdict made without the reference's time
    assert Verdict("m", True, False, (unknown, fused), (), "s.zarr", None, "H100").together is None
