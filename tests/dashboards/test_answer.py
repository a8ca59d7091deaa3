"""The report and `mugraph show` lead with the answer: the best μGraph against the reference program,
the reference's row present however far down it ranks, and every counter explained."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from mugraph.cli import show as cli_show
from mugraph.dashboards import report
from mugraph.dashboards.report import ReportData, read_report_data, render_report, report_path
from mugraph.dashboards.summary import COUNTER_MEANINGS, headline, rows_to_show
from mugraph.stages.layout.describe import seconds_text
from mugraph.stages.search.explore import SearchCounters
from tests.helpers.cli_runs import done, mugraph, optimize_args


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ReportData]:
    cwd = tmp_path_factory.mktemp("answer")
    store = cwd / "run.zarr"
    done(mugraph(*optimize_args("lora", store, "--workers", "2", "--memo-url", "local", budget=40), cwd=cwd))
    return store, read_report_data(report_path(store).read_text())


def test_the_headline_is_best_against_the_reference(run: tuple[Path, ReportData]) -> None:
    store, data = run
    ranking = data["ranking"]["f0"]
    h = data["headlines"]["f0"]
    ref = next(r for r in ranking if r.get("reference"))
    best = ranking[0]
    assert h is not None and data["final"] is not None
    assert h["best"] == best["digest"] == data["final"]["best"] and not h["best_is_reference"]
    assert h["reference_seconds"] == ref["estimated_seconds"] and h["seconds"] == best["estimated_seconds"]
    assert h["speedup"] == pytest.approx(ref["estimated_seconds"] / best["estimated_seconds"]) and h["speedup"] > 1
    assert (h["kernels"], h["reference_kernels"]) == (best["kernels"], ref["kernels"])
    assert h["reference_rank"] == ranking.index(ref) + 1
    text = report_path(store).read_text()
    answer = text.index('<section id="answer">')
    assert answer < text.index('<section id="configuration">')  # the answer comes first
    section = text[answer : text.index("</section>", answer)]
    for words in (
        best["digest"][:16],
        seconds_text(best["estimated_seconds"]),
        seconds_text(ref["estimated_seconds"]),
        f"{h['speedup']:.2f}x",
        f"{ref['dram_bytes']:,}",
        "Why: ",
    ):
        assert words in section, words


def test_the_reference_row_is_shown_past_the_row_limit(
    run: tuple[Path, ReportData], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, data = run
    ranking = data["ranking"]["f0"]
    rank = next(n for n, r in enumerate(ranking, 1) if r.get("reference"))
    assert rank > 1
    monkeypatch.setattr(report, "RANKING_ROWS", 1)
    html = render_report(data)
    section = html[html.index('<section id="ranking">') :]
    rows = re.findall(r"<tr(?: class=\"ref\")?><td class=\"l\">(\d+)</td>", section)
    assert rows == ["1", str(rank)]
    assert re.search(rf'<tr class="ref"><td class="l">{rank}</td><td class="l">reference</td>', section)
    assert [n for n, _ in rows_to_show(ranking, 1)] == [1, rank]
    assert rows_to_show(ranking, None) == list(enumerate(ranking, 1))


def test_show_leads_with_the_headline_and_keeps_the_reference_row(
    run: tuple[Path, ReportData], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, data = run
    monkeypatch.setattr(cli_show, "SHOW_ROWS", 1)
    out = CliRunner().invoke(cli_show.show, [str(store)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    h = headline(data["ranking"]["f0"])
    assert h is not None and lines[1].strip() == h["line"]
    table = [ln.split() for ln in lines if re.match(r"^\s+\d+\s", ln)]
    assert [row[0] for row in table] == ["1", str(h["reference_rank"])] and table[1][1] == "reference"


def test_every_counter_is_explained(run: tuple[Path, ReportData]) -> None:
    _, data = run
    assert set(SearchCounters().as_dict()) <= set(COUNTER_MEANINGS)
    html = render_report(data)
    section = html[html.index('<section id="counters">') :]
    for name in data["counters"]:
        assert f'<td class="l">{name}</td><td class="l">{COUNTER_MEANINGS[name]}</td>' in section, name


def test_charts_span_the_page(run: tuple[Path, ReportData]) -> None:
    _, data = run
    html = render_report(data)
    widths = re.findall(r'<figure class="chart"[^>]*><figcaption>[^<]*</figcaption><svg [^>]*width="(\d+)"', html)
    assert widths and all(int(w) == report.CHART_WIDTH for w in widths)
    assert "figure.chart svg{width:100%" in html
