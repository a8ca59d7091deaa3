"""A dashboard port that something else holds: the cluster starts on another and prints nothing (not
Dask's three-line warning from the scheduler's process, nor a line of ours: a library caller with
verbose=False gets silence); the start line says which port was taken."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from mugraph.dashboards.console import start_line
from mugraph.pipeline.cluster import dashboard_link, dashboard_taken, dask_client, free_dashboard, port_taken
from tests.helpers.cli_runs import done, events, mugraph, optimize_args


def _listening() -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_a_taken_port_is_seen_and_a_free_one_is_not() -> None:
    with _listening() as s:
        port = s.getsockname()[1]
        assert port_taken(f"127.0.0.1:{port}") and free_dashboard(f":{port}") == ("127.0.0.1:0", str(port))
    assert not port_taken(f"127.0.0.1:{port}") and free_dashboard(f":{port}") == (f"127.0.0.1:{port}", None)
    assert free_dashboard(":0") == ("127.0.0.1:0", None)


def test_the_cluster_moves_the_dashboard_and_the_start_line_says_so(capfd: pytest.CaptureFixture[str]) -> None:
    with _listening() as s:
        port = s.getsockname()[1]
        with dask_client(workers=1, dashboard_address=f"127.0.0.1:{port}") as client:
            moved = urlsplit(client.dashboard_link).port
            taken = dashboard_taken(client)
            link = client.dashboard_link
    assert moved not in (None, port) and taken == str(port)
    assert capfd.readouterr().err.strip() == ""
    start = {"resumed": False, "program": "p", "store": "p.zarr", "fragments": ["f0"], "tasks_done": 0}
    line = start_line({**start, "tasks_pending": 1, "workers": 1, "dashboard": link, "dashboard_taken": taken})
    assert f"dashboard {link} (port {port} was taken), search page" in line


def test_a_free_port_is_not_said_taken() -> None:
    with dask_client(workers=1, dashboard_address="127.0.0.1:0") as client:
        assert dashboard_taken(client) is None


def test_a_port_taken_between_the_look_and_the_start_is_said_taken_too(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process may take the port after `port_taken` looked (two runs starting together): Dask
    moves the dashboard and warns in three lines; the warning is not printed and the port is said taken."""
    from mugraph.pipeline import cluster

    monkeypatch.setattr(cluster, "port_taken", lambda address: False)  # the look, made before the other took it
    with _listening() as s:
        port = s.getsockname()[1]
        with dask_client(workers=1, dashboard_address=f"127.0.0.1:{port}") as client:
            taken = dashboard_taken(client)
    assert taken == str(port)
    assert "already in use" not in capfd.readouterr().err


def test_a_run_without_a_dashboard_serves_none_and_says_so(tmp_path: Path) -> None:
    """`--dashboard-address none`: the scheduler serves no HTTP dashboard (and never imports Bokeh),
    the start line says `dashboard none`, and the run ends as any other."""
    proc = mugraph(*optimize_args("rms_norm", tmp_path / "run.zarr", dashboard="none"), cwd=tmp_path)
    start = next(e for e in events(proc) if e["event"] == "start")
    assert start["dashboard"] is None and start.get("live_page") is None, start
    assert "dashboard none, search page -" in proc.stderr
    assert done(proc)["complete"]


def _bokeh_loaded() -> bool:
    import sys

    return "bokeh" in sys.modules


def test_the_library_takes_none_for_no_dashboard() -> None:
    with dask_client(workers=1, dashboard_address=None) as client:
        assert dashboard_link(client) == "" and dashboard_taken(client) is None
        assert not client.run_on_scheduler(_bokeh_loaded)
        port = client.scheduler_info()["services"].get("dashboard")  # Dask's HTTP routes: any free port
        assert port != 8787
    with dask_client(workers=1, dashboard_address="127.0.0.1:0") as client:
        assert dashboard_link(client) == client.dashboard_link != "" and client.run_on_scheduler(_bokeh_loaded)


def test_a_bad_dashboard_address_is_told_it_may_be_none() -> None:
    from mugraph.ir.errors import MugraphError
    from mugraph.run.checks import check_host_port

    with pytest.raises(MugraphError, match=r"'nowhere' is not an address such as 127.0.0.1:8787 or :0, nor none"):
        check_host_port("nowhere", "--dashboard-address", none="none")
