"""A dashboard port that something else holds: the cluster starts on another, and the terminal gets
one line of ours saying which, not Dask's three-line warning from the scheduler's process."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pytest

from mugraph.pipeline.cluster import dask_client, free_dashboard, port_taken


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


def test_the_cluster_moves_the_dashboard_and_says_so_in_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    with _listening() as s:
        port = s.getsockname()[1]
        with dask_client(workers=1, dashboard_address=f"127.0.0.1:{port}") as client:
            moved = urlsplit(client.dashboard_link).port
    err = capfd.readouterr().err
    assert moved not in (None, port)
    assert err.strip().splitlines() == [f"mugraph: dashboard on port {moved} ({port} was taken)"], err
