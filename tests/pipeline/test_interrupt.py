"""Ctrl-C on the terminal (SIGINT to the whole process group) or SIGTERM to the driver: one line, exit 130,
no worker tracebacks; the same command then resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli_runs import as_from_a_terminal, start


def with_interrupt_handlers(lines: list[str]) -> subprocess.CompletedProcess[str]:
    """`lines` run as a Python program after the command's interrupt handlers are installed,
    started as a terminal's foreground job."""
    code = "\n".join(
        ["from mugraph.pipeline.interrupts import install_interrupt_handlers", "install_interrupt_handlers()", *lines]
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, preexec_fn=as_from_a_terminal
    )


@pytest.mark.parametrize(
    ("sig", "group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-to-the-group", "sigterm-to-the-driver"],
)
def test_interrupted_run_says_one_line(tmp_path: Path, sig: signal.Signals, group: bool) -> None:
    # lora's whole default space (minutes): still searching when the signal comes, however fast
    # the driver turns tasks around (the narrowed space can finish within the 1.5 s)
    args = ["optimize", "lora", "--store", str(tmp_path / "run.zarr"), "--json", "--dashboard-address", "none"]
    proc = start([*args, "--workers", "2"], tmp_path)
    try:
        assert proc.stderr is not None
        lines = [proc.stderr.readline()]  # the start line: the cluster is up, workers are running tasks
        assert lines[0].startswith("mugraph: starting"), lines
        time.sleep(1.5)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = [line for line in (lines[0] + rest).splitlines() if line.strip()]
    assert proc.returncode == 130, err
    assert err[-1] == "mugraph: interrupted; run the same command to resume", err
    noise = [line for line in err if "Traceback" in line or "KeyboardInterrupt" in line or "Error" in line]
    assert not noise, "\n".join(err)  # all of stderr: which process printed the traceback


def test_ctrl_c_stops_a_serial_search_mid_solve(tmp_path: Path) -> None:
    """Z3 must not swallow the Ctrl-C (answering the running check "unknown" and going on)."""
    args = ["search", "lora", "--memo-url", "local", "--budget", "20"]
    proc = start(args, tmp_path)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the progress line: the search is solving
        assert "states" in first, first
        os.killpg(proc.pid, signal.SIGINT)
        started = time.monotonic()
        _, rest = proc.communicate(timeout=60)
        waited = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and waited < 10, (proc.returncode, waited)
    assert rest.strip().splitlines()[-1] == "mugraph: interrupted; run the same command to resume"
    assert "Traceback" not in rest


def test_z3_leaves_ctrl_c_to_python_wherever_the_oracle_runs() -> None:
    """Workers ignore SIGINT, but Z3 would still catch it during a check and answer "unknown"."""
    code = "import z3, mugraph.stages.prune.oracle; print(z3.get_param('ctrl_c'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "false"


def test_an_interrupt_quiets_the_event_loop_loggers_then_unwinds() -> None:
    """Dask's client thread may log a callback's traceback while the cluster shuts down after an
    interrupt (distributed's `sync()` interrupted before its coroutine ran); the handler silences
    those loggers before anything unwinds, and SIGTERM is taken once."""
    code = "\n".join(
        [
            "import logging, signal",
            "from mugraph.pipeline.interrupts import _interrupted",
            "try:",
            "    _interrupted(signal.SIGTERM, None)",
            "except KeyboardInterrupt:",
            "    print('unwinds')",
            "print(any(logging.getLogger(n).isEnabledFor(logging.CRITICAL) for n in ",
            "          ('tornado.application', 'asyncio', 'distributed')))",
            "print(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["unwinds", "False", "True"], out.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_raised_inside_a_finalizer_is_delivered_again(sig: signal.Signals) -> None:
    """Python runs a signal's handler at the next bytecode, which may be inside a `__del__`, a
    weakref callback or a gc callback (distributed registers one); the KeyboardInterrupt raised
    there is printed as "Exception ignored" and dropped, and the command would run to its end.
    The signal must reach the command's own code, with no traceback."""
    out = with_interrupt_handlers(
        [
            "import os, signal, time",
            "class Finalized:",
            "    def __del__(self):",
            f"        os.kill(os.getpid(), {int(sig)})",
            "        for _ in range(10000): pass  # the handler runs here, inside __del__",
            "try:",
            "    Finalized()",
            "    t = time.monotonic()",
            "    while time.monotonic() - t < 10: pass",
            "    print('ran on')",
            "except KeyboardInterrupt:",
            "    print('interrupted')",
        ]
    )
    assert out.stdout.split() == ["interrupted"], (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "ignored" not in out.stderr, out.stderr


def test_finalizers_of_objects_an_interrupt_cut_short_print_nothing() -> None:
    """An interrupt inside an `__init__` leaves an object without the attributes its `__del__`
    reads (z3's Context without `owner`); that finalizer's error must not follow the command's
    one line. Before any interrupt such errors are still printed."""
    out = with_interrupt_handlers(
        [
            "import gc, os, signal, sys",
            "class HalfBuilt:",
            "    def __init__(self, interrupt):",
            "        if interrupt:",
            "            os.kill(os.getpid(), signal.SIGINT)",
            "            for _ in range(10000): pass  # the handler runs here",
            "        self.owner = True",
            "    def __del__(self):",
            "        assert self.owner, 'unset'",
            "class Broken:",
            "    def __del__(self):",
            "        raise ValueError('a finalizer bug, before any interrupt')",
            "Broken()",
            "gc.collect()",
            "try:",
            "    HalfBuilt(True)",
            "except KeyboardInterrupt:",
            "    gc.collect()",
            "    print('interrupted', file=sys.stderr)",
        ]
    )
    err = out.stderr.strip().splitlines()
    assert err[-1] == "interrupted", out.stderr
    assert "a finalizer bug, before any interrupt" in out.stderr  # not swallowed before the interrupt
    assert "AttributeError" not in out.stderr, out.stderr


CLUSTER_STARTING = [
    "import os, signal, subprocess, threading, time",
    "from distributed.deploy.spec import SpecCluster",
    "from mugraph.pipeline.cluster import dask_client",
    "def children(pattern):",
    "    argv = ['pgrep', '-P', str(os.getpid()), '-f', pattern]",
    "    return subprocess.run(argv, capture_output=True, text=True).stdout.split()",
    "def interrupt_once_the_scheduler_process_starts():",
    "    while not children('scheduler_process import serve'):",
    "        time.sleep(0.005)",
    "    os.kill(os.getpid(), signal.SIGINT)",
    "threading.Thread(target=interrupt_once_the_scheduler_process_starts, daemon=True).start()",
    "try:",
    "    with dask_client(workers=1, dashboard_address=':0'):",
    "        time.sleep(50)",
    "    print('ran on')",
    "except KeyboardInterrupt:",
    "    print('interrupted')",
    "print(*[c.status.name for c in SpecCluster._instances], len(children('scheduler_process')))",
    "print(*sorted(t.name for t in threading.enumerate() if not t.daemon or 'loop' in t.name.lower()))",
]


@pytest.mark.parametrize("handlers", ["command", "library"])
def test_an_interrupt_while_the_cluster_starts_closes_what_it_started(handlers: str) -> None:
    """Ctrl-C while the local cluster's scheduler process starts (the command's handlers, or Python's
    own in a script calling `mugraph.optimize`): the interrupt comes once the start is whole, and the
    cluster is closed, its scheduler process and event loop gone, not left half made to the end."""
    library = ["import signal", "signal.signal(signal.SIGINT, signal.default_int_handler)"]
    out = with_interrupt_handlers((library if handlers == "library" else []) + CLUSTER_STARTING)
    assert out.stdout.splitlines() == ["interrupted", "closed 0", "MainThread"], (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr


def test_held_interrupts_come_on_the_way_out() -> None:
    out = with_interrupt_handlers(
        [
            "import os, signal",
            "from mugraph.pipeline.interrupts import held",
            "try:",
            "    with held():",
            "        os.kill(os.getpid(), signal.SIGINT)",
            "        for _ in range(100000): pass  # the handler runs here",
            "        print('held')",
            "except KeyboardInterrupt:",
            "    print('then interrupted')",
            "print(signal.getsignal(signal.SIGINT).__name__)",
        ]
    )
    assert out.stdout.split() == ["held", "then", "interrupted", "_interrupted"], (out.stdout, out.stderr)


def test_a_second_interrupt_is_not_held() -> None:
    """Ctrl-C pressed again while a start hangs stops the command there, once."""
    out = with_interrupt_handlers(
        [
            "import os, signal, time",
            "from mugraph.pipeline.interrupts import held",
            "try:",
            "    with held():",
            "        os.kill(os.getpid(), signal.SIGINT)",
            "        for _ in range(100000): pass",
            "        print('held')",
            "        os.kill(os.getpid(), signal.SIGTERM)",
            "        time.sleep(10)",
            "        print('ran on')",
            "except KeyboardInterrupt as e:",
            "    print('interrupted', e.__context__ is None)",
        ]
    )
    assert out.stdout.split() == ["held", "interrupted", "True"], (out.stdout, out.stderr)
