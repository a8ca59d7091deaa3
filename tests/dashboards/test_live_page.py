"""The live search page in the Dask dashboard, opened in headless Chromium: on a real LocalCluster
with events published here, then during real `mugraph optimize` runs (a new one, the same run killed
and resumed, and a run over an external `dask scheduler` with `dask worker`s)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import distributed
import numpy as np
import pytest

from mugraph.dashboards.live import install, page_url, publish
from mugraph.dashboards.live_state import MAX_ROWS, LiveState
from tests.helpers.waiting import wait_for

SOURCES = (
    "mugraph-states",
    "mugraph-rates",
    "mugraph-tasks",
    "mugraph-memo",
    "mugraph-best",
    "mugraph-results",
    "mugraph-fragments",
    "mugraph-workers",
    "mugraph-events",
)
# every named source of the page: its length, columns and (NaN as null) data
READ_SOURCES = """
const doc = (window.Bokeh && Bokeh.documents.length) ? Bokeh.documents[0] : null;
if (doc === null) return null;
const out = {};
for (const name of arguments[0]) {
    const s = doc.get_model_by_name(name);
    if (s === null) { out[name] = null; continue; }
    const data = {};
    for (const c of s.columns())
        data[c] = Array.from(s.get_column(c), v => (typeof v === "number" && isNaN(v)) ? null : v);
    out[name] = {length: s.get_length(), data: data};
}
const header = doc.get_model_by_name("mugraph-header");
out.header = header === null ? null : header.text;
return out;
"""
Client: Any = distributed.Client  # (only partly annotated)
LocalCluster: Any = distributed.LocalCluster
# the labels of the visible per-fragment lines' legend items
LEGEND_LABELS = """
const items = [...Bokeh.documents[0].all_models].filter(m => m.type === "LegendItem");
return items.filter(i => i.renderers.some(r => r.visible && /^f[0-9]+_/.test(r.glyph.y.field)))
            .map(i => i.label.value);
"""
LORA = [
    "optimize",
    "lora",
    "--set",
    "grids=[[64,1,1]]",
    "--set",
    "fmaps=[-1]",
    "--set",
    "kernel_ops=[]",
    "--set",
    "imaps=[[-1,-1,-1],[1,-1,-1]]",
    "--budget",
    "20",
    "--memo-url",
    "local",
    "--json",
]
# lora's whole default space: about 2.5 minutes on 2 cores, so it is still running when the test kills it
LONG_LORA = ["optimize", "lora", "--budget", "200", "--memo-url", "local", "--json"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_page(browser: Any) -> dict[str, Any] | None:
    out = browser.execute_script(READ_SOURCES, list(SOURCES))
    return out if isinstance(out, dict) else None


def open_page(browser: Any, url: str) -> dict[str, Any]:
    """Load the page and wait until its Bokeh document is there with some states plotted."""
    browser.get(url)
    wait_for(
        f"a Bokeh document at {url}",
        lambda: browser.execute_script("return !!(window.Bokeh && Bokeh.documents.length > 0)"),
    )
    page: dict[str, Any] = wait_for("states on the page", lambda: _with_states(read_page(browser)))
    return page


def _with_states(page: dict[str, Any] | None, at_least: int = 1) -> dict[str, Any] | None:
    if page is None or page.get("mugraph-states") is None:
        return None
    return page if len(states(page)) >= at_least else None


def _grown(page: dict[str, Any] | None) -> dict[str, Any] | None:
    """The page once its plotted states have grown past the first sample's."""
    page = _with_states(page, 2)
    return page if page is not None and states(page)[-1] > states(page)[0] else None


def states(page: dict[str, Any]) -> list[float]:
    """The run-wide states explored, as plotted (the NaN rows between invocations left out)."""
    return [v for v in page["mugraph-states"]["data"]["states"] if v is not None]


def screenshot(browser: Any, path: Path) -> None:
    browser.save_screenshot(str(path))
    assert path.stat().st_size > 20_000, f"{path} looks blank ({path.stat().st_size} bytes)"


def progress(i: int, wall: float, *, seconds: float | None = None, invocation: int = 0) -> dict[str, Any]:
    """A progress event as the driver sends it (two fragments, two workers)."""
    frags = {
        "attn": {
            "states": 70 * i,
            "tasks_done": i,
            "tasks_running": 1,
            "tasks_pending": 4,
            "mugraphs": i // 4,
            "confirmed": i // 6,
        },
        "mlp": {
            "states": 30 * i,
            "tasks_done": i // 2,
            "tasks_running": 1,
            "tasks_pending": 2,
            "mugraphs": 0,
            "confirmed": 0,
        },
    }
    return {
        "event": "progress",
        "wall": wall,
        "seconds": float(i) if seconds is None else seconds,
        "invocation": invocation,
        "tasks_done": i + i // 2,
        "tasks_running": 2,
        "tasks_pending": 6,
        "tasks_run": i,
        "states": 100 * i,
        "states_per_s": 100.0,
        "mugraphs": i // 4,
        "confirmed": i // 6,
        "solver_calls": 3 * i,
        "fingerprints": 5 * i,
        "memo_local_hit_rate": 0.25 if i else None,
        "memo_remote_hit_rate": 0.5 if i else None,
        "memo": {"local_hits": i, "remote_hits": 2 * i, "misses": i},
        "fragments": frags,
        "worker_busy_seconds": {"tcp://127.0.0.1:40001": 0.6 * i, "tcp://127.0.0.1:40002": 0.4 * i},
    }


def test_state_history_without_invocation_numbers_and_thinning() -> None:
    st = LiveState()
    st.apply({"event": "start", "program": "p", "fragments": ["attn"]})
    # two earlier invocations told apart by "seconds" starting over; then this one
    st.apply(
        {
            "event": "history",
            "samples": [
                *(
                    {k: v for k, v in progress(i, 1000.0 + i).items() if k not in ("event", "invocation")}
                    for i in range(5)
                ),
                *(
                    {
                        k: v
                        for k, v in progress(i + 5, 2000.0 + i, seconds=float(i)).items()
                        if k not in ("event", "invocation")
                    }
                    for i in range(5)
                ),
            ],
        }
    )
    epoch = st.epoch
    st.apply(progress(10, 3000.0, seconds=0.0, invocation=7))
    assert st.epoch == epoch  # appended, not replaced
    assert len({r["inv"] for r in st.rows}) == 3 and [r["t"] for r in st.rows] == sorted(r["t"] for r in st.rows)
    cols = st.columns(["states"])
    assert len(cols["t"]) == 11 + 2 and np.isnan(cols["states"]).sum() == 2  # a break between invocations
    assert st.elapsed() == pytest.approx(4.0 + 4.0 + 0.0)
    for i in range(MAX_ROWS + 10):
        st.apply(progress(11 + i, 3001.0 + i, seconds=1.0 + i, invocation=7))
    assert MAX_ROWS // 2 <= len(st.rows) <= MAX_ROWS and st.rows[0]["t"] == 1000.0 * 1000
    assert st.rows[-1]["states"] == 100 * (10 + MAX_ROWS + 10)
    assert st.rows[-1]["rate"] == pytest.approx(100.0) and st.rows[-1]["f0_rate"] == pytest.approx(70.0)
    assert st.status(now=st.updated) == "running"
    assert "no news" in st.status(now=st.updated + 60)
    st.apply({"event": "done", "complete": False, "resume": "run the same command without --fresh to resume"})
    assert st.status() == "stopped (run the same command without --fresh to resume)"  # not "the same command"


def test_page_url_replaces_the_last_segment() -> None:
    assert page_url("http://127.0.0.1:8787/status") == "http://127.0.0.1:8787/mugraph"
    assert page_url("https://host:1/proxy/8787/status") == "https://host:1/proxy/8787/mugraph"
    assert page_url("http://host:8787") == "http://host:8787/mugraph"


def test_page_on_a_local_cluster_with_published_events(browser: Any, artifacts: Path) -> None:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):
        url = install(client)
        assert url is not None and url == install(client)  # idempotent
        assert url.endswith("/mugraph") and url.startswith(client.dashboard_link.rsplit("/", 1)[0])
        # opened before the run starts: it waits, then fills in without a reload
        browser.get(url)
        wait_for("the empty page", lambda: "waiting for a run" in ((read_page(browser) or {}).get("header") or ""))
        publish(
            client,
            {
                "event": "start",
                "program": "lora",
                "store": "/runs/lora.zarr",
                "resumed": True,
                "fragments": ["attn", "mlp"],
                "presets": {"attn": "small", "mlp": "small"},
                "tasks_done": 10,
                "tasks_pending": 5,
                "workers": 2,
                "invocation": 1,
            },
        )
        now = time.time()
        # an earlier invocation (its seconds restart at 0), then this one's events
        publish(
            client,
            {
                "event": "history",
                "samples": [
                    {k: v for k, v in progress(i, now - 300 + i, invocation=0).items() if k != "event"}
                    for i in range(20)
                ],
            },
        )
        for i in range(20, 40):
            publish(client, progress(i, now - 40 + i, seconds=float(i - 20), invocation=1))
        publish(client, {"event": "found", "fragment": "attn", "digest": "0123456789abcdef" * 4})
        publish(client, {"event": "not-an-event-the-page-knows"})
        publish(client, {"event": "progress", "wall": "garbage"})  # malformed: ignored on the scheduler

        page = wait_for("all 40 samples", lambda: _with_states(read_page(browser), 40))
        for name in SOURCES:
            assert page[name] is not None and page[name]["length"] > 0, name
        st = page["mugraph-states"]["data"]
        assert states(page)[-1] == 39 * 100 and states(page)[0] == 0
        assert st["f0_states"][-1] == 70 * 39 and st["f1_states"][-1] == 30 * 39  # attn, mlp
        assert page["mugraph-states"]["length"] == 41  # 40 samples and the break between the invocations
        assert st["t"][0] == pytest.approx((now - 300) * 1000) and None in st["states"]
        rates = [v for v in page["mugraph-rates"]["data"]["rate"] if v is not None]
        assert rates and all(r == pytest.approx(100.0) for r in rates)
        memo = page["mugraph-memo"]["data"]
        assert memo["memo_local"][-1] == 0.25 and memo["memo_remote"][-1] == 0.5
        assert page["mugraph-results"]["data"]["solver_calls"][-1] == 3 * 39
        assert page["mugraph-fragments"]["data"]["fragment"] == ["attn", "mlp"]
        assert page["mugraph-fragments"]["data"]["pending"] == [4, 2]
        workers = page["mugraph-workers"]["data"]
        assert workers["busy"] == [pytest.approx(0.6 * 39), pytest.approx(0.4 * 39)]
        assert page["mugraph-events"]["data"]["fragment"] == ["attn"]
        assert "mugraph lora" in page["header"] and "/runs/lora.zarr" in page["header"]

        # live: a new sample (and a new fragment) reaches the open page without a reload
        later = progress(40, now + 1, seconds=21.0, invocation=1)
        later["fragments"]["norm"] = {"states": 5, "tasks_done": 1, "tasks_running": 0, "tasks_pending": 0}
        publish(
            client,
            {
                "event": "layout",
                "fragment": "attn",
                "digest": "ab" * 32,
                "estimated_seconds": 2e-6,
                "reference_seconds": 5e-6,
            },
        )  # a ranked μGraph: the best-so-far curve starts at 2.5x
        publish(client, later)
        page = wait_for("the new sample", lambda: _with_states(read_page(browser), 41))
        assert states(page)[-1] == 4000 and page["mugraph-states"]["data"]["f2_states"][-1] == 5
        best = page["mugraph-best"]["data"]
        assert best["f0_best"][-1] == pytest.approx(2.5) and best["f1_best"][-1] is None
        assert best["speedup_one"][-1] == 1.0
        assert page["mugraph-fragments"]["data"]["fragment"] == ["attn", "mlp", "norm"]
        publish(client, {"event": "done", "complete": True})
        wait_for("the run to show as complete", lambda: "complete" in (read_page(browser) or {}).get("header", ""))
        screenshot(browser, artifacts / "live_page.png")
        # another run on the same scheduler: the open page starts over, its legends follow
        publish(
            client,
            {
                "event": "start",
                "program": "rms_norm",
                "store": "/runs/rms.zarr",
                "resumed": False,
                "fragments": ["ffn"],
                "invocation": 0,
            },
        )
        one = progress(1, now + 2, invocation=0)
        one["fragments"] = {"ffn": one["fragments"]["attn"]}
        publish(client, one)
        page = wait_for(
            "the new run",
            lambda: (
                (p := read_page(browser)) and "rms_norm" in p["header"] and p["mugraph-states"]["length"] == 1 and p
            ),
        )
        assert page["mugraph-fragments"]["data"]["fragment"] == ["ffn"]
        assert browser.execute_script(LEGEND_LABELS) == ["ffn"] * 3  # states, states/s, best so far
        # the dashboard's own pages still work, with a link to this one in their nav bar
        browser.get(client.dashboard_link)
        wait_for(
            "the dashboard's status page",
            lambda: browser.execute_script("return !!(window.Bokeh && Bokeh.documents.length > 0)"),
        )
        assert browser.execute_script("return !!document.querySelector(\"a[href='mugraph']\")")


def test_publish_never_raises() -> None:
    with LocalCluster(n_workers=0, processes=False, dashboard_address="127.0.0.1:0") as cluster:
        client = Client(cluster)
        assert install(client) is not None
        publish(client, {"event": "progress", "wall": time.time(), "odd": {1, 2}, "obj": object()})  # made JSON
        client.close()
        publish(client, {"event": "progress", "wall": time.time()})  # a closed client: a warning at most
        publish(client, {"event": "done"})
    no_dashboard = LocalCluster(n_workers=0, processes=False, dashboard_address=None)
    with no_dashboard, Client(no_dashboard) as client:
        assert install(client) is None
        publish(client, {"event": "start"})  # nothing to send to


# -- real runs -----------------------------------------------------------------------------------------


class Run:
    """`mugraph optimize` as a subprocess; its NDJSON events read on a thread into a queue."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mugraph.cli", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr or []), daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.put(json.loads(line))

    def next(self, kind: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                e = self.events.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self.events.empty():
                    break
                continue
            if e.get("event") == kind:
                return e
        pytest.fail(
            f"no {kind!r} event from mugraph optimize (status {self.proc.poll()}): {''.join(self.stderr)[-2000:]}"
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout=timeout)


@contextlib.contextmanager
def running(args: list[str], cwd: Path) -> Iterator[Run]:
    run = Run(args, cwd)
    try:
        yield run
    finally:
        run.kill()


def live_page_of(start: dict[str, Any], dashboard_port: int) -> str:
    url = start.get("live_page") or f"http://127.0.0.1:{dashboard_port}/mugraph"
    assert isinstance(url, str) and url.endswith(f":{dashboard_port}/mugraph"), start
    return url


@pytest.mark.slow  # a browser through a run, a kill and a resume: about 27 s
def test_page_during_a_run_then_killed_and_resumed(browser: Any, artifacts: Path, tmp_path: Path) -> None:
    port = free_port()
    args = [
        *LONG_LORA,
        "--workers",
        "2",
        "--store",
        str(tmp_path / "run.zarr"),
        "--dashboard-address",
        f"127.0.0.1:{port}",
    ]
    with running(args, tmp_path) as first:
        start = first.next("start")
        assert start["resumed"] is False
        url = live_page_of(start, port)
        page = open_page(browser, url)
        # a loaded machine may plot several samples before the first state is explored: wait for growth
        page = wait_for("states to grow on the page", lambda: _grown(read_page(browser)), timeout=120)
        seen = states(page)
        assert seen == sorted(seen) and seen[-1] > seen[0], seen
        assert page["mugraph-workers"]["length"] > 0 and page["mugraph-fragments"]["length"] > 0
        assert first.proc.poll() is None, "the run ended before it could be killed; this test needs a longer one"
        first.kill()
    first_end = time.time()
    with running(args, tmp_path) as second:
        start = second.next("start")
        assert start["resumed"] is True
        open_page(browser, live_page_of(start, port))
        # the series start before this invocation: the earlier one's samples came as history
        page = wait_for(
            "a sample of the resumed invocation",
            lambda: (
                (p := _with_states(read_page(browser)))
                and p["mugraph-states"]["data"]["t"][-1] > first_end * 1000
                and p
            ),
        )
        t = page["mugraph-states"]["data"]["t"]
        assert t[0] < first_end * 1000, (t[0], first_end * 1000)
        assert None in page["mugraph-states"]["data"]["states"]  # the break between the invocations
        assert states(page)[-1] >= seen[-1]  # counters are run-wide
        assert "(resumed)" in page["header"]
        screenshot(browser, artifacts / "live_page_resumed.png")
        assert second.proc.poll() is None, "".join(second.stderr)[-2000:]  # still running: killed on exit


@pytest.mark.slow  # a scheduler, workers and a browser: about 18 s
def test_page_on_an_external_dask_scheduler(browser: Any, artifacts: Path, tmp_path: Path) -> None:
    port, dashboard = free_port(), free_port()
    address = f"tcp://127.0.0.1:{port}"
    quiet: dict[str, Any] = {"cwd": tmp_path, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dashboard-address",
            f"127.0.0.1:{dashboard}",
        ],
        **quiet,
    )
    procs = [scheduler]
    try:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "2", "--nthreads", "1"],
                **quiet,
            )
        )
        # the narrowed space completes in seconds on an idle machine; the time limit only bounds a loaded
        # one, and leaves room for its first tasks to finish (a stop before any would show no work)
        args = [*LORA, "--scheduler", address, "--store", str(tmp_path / "run.zarr"), "--time-limit", "60"]
        with running(args, tmp_path) as run:
            start = run.next("start")
            url = live_page_of(start, dashboard)
            page = open_page(browser, url)
            assert page["mugraph-workers"] is not None
            assert run.wait() == 0, "".join(run.stderr)[-2000:]
            last: dict[str, Any] = {}
            while not run.events.empty():
                e = run.events.get()
                last = e if e.get("event") == "progress" else last
        # the scheduler outlives the run: its page shows the whole of it, to the last sample
        assert last, "no progress events"
        browser.get(url)
        page = wait_for(
            "the run's last sample",
            lambda: (p := _with_states(read_page(browser))) is not None and states(p)[-1] == last["states"] and p,
        )
        data = page["mugraph-tasks"]["data"]
        assert data["tasks_pending"][-1] == last["tasks_pending"] and data["tasks_done"][-1] == last["tasks_done"] > 0
        assert page["mugraph-workers"]["length"] == len(last["worker_busy_seconds"]) > 0
        assert math.isclose(sum(page["mugraph-workers"]["data"]["busy"]), sum(last["worker_busy_seconds"].values()))
        screenshot(browser, artifacts / "live_page_external.png")
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)
