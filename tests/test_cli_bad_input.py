"""Every bad input of every command: one line on stderr, exit status 2, no traceback, and nothing created
(no store, no memo directory, no cluster) — options are checked before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mugraph.arrays.backend import cupy_available
from mugraph.cli import main
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps, to_json
from mugraph.run.checks import WORKERS_PER_CORE_WARNING, max_workers, usable_cores

DEEP = 100_000

# (id, argv, words the one line must contain). Paths are relative to a scratch working directory that holds
# `afile` (a plain file) and the program files written by `scratch`.
CASES: list[tuple[str, list[str], str]] = [
    ("set-1e400", ["search", "lora", "--set", "max_kernel_ops=1e400"], "expected an integer"),
    (
        "optimize-glue-only",
        ["optimize", "glue_only.py"],
        "nothing to search: every op of the program that reaches an output is glue (relu)",
    ),
    ("set-neg-infinity", ["search", "lora", "--set", "max_block_ops=-Infinity"], "expected an integer"),
    ("set-huge", ["search", "lora", "--set", "rlimit=1e300"], "out of range"),
    ("set-fraction", ["search", "lora", "--set", "max_kernel_ops=2.5"], "expected an integer"),
    ("set-huge-in-list", ["search", "lora", "--set", "franges=[1e400]"], "expected an integer"),
    ("optimize-set-1e400", ["optimize", "lora", "--set", "max_kernel_ops=1e400"], "expected an integer"),
    ("set-negative-seed", ["search", "lora", "--set", "seeds=[-1]"], "seed"),
    ("optimize-negative-seed", ["optimize", "lora", "--set", "seeds=[-1]"], "seed"),
    ("check-negative-seed", ["check", "lora", "--seeds", "-1"], "seeds"),
    ("set-empty-value", ["search", "lora", "--set", "grids="], "empty value"),
    ("optimize-set-empty-value", ["optimize", "lora", "--set", "franges="], "empty value"),
    ("set-fmap-no-dim", ["search", "lora", "--set", "fmaps=[7]"], "fmaps"),
    ("set-imap-no-dim", ["search", "lora", "--set", "imaps=[[9,9,9]]"], "imaps"),
    ("set-omap-no-dim", ["optimize", "lora", "--set", "omaps=[[5,-1,-1]]"], "omaps"),
    ("set-zero-divisor", ["search", "lora", "--set", "grid_divisors=[0]"], "divisor"),
    ("set-zero-attention-divisor", ["optimize", "gqa", "--set", "attention_divisors=[0,8]"], "divisor"),
    ("set-deeply-nested", ["search", "lora", "--set", "grids=" + "[" * DEEP + "]" * DEEP], "nested too deeply"),
    ("memo-url-bad-port", ["search", "lora", "--memo-url", "redis://127.0.0.1:99999/0"], "port"),
    ("prune-memo-url-bad-port", ["prune", "lora", "--memo-url", "redis://127.0.0.1:99999/0"], "port"),
    ("optimize-memo-url-bad-port", ["optimize", "lora", "--memo-url", "redis://127.0.0.1:99999/0"], "port"),
    ("optimize-memo-url-unreachable", ["optimize", "lora", "--memo-url", "redis://127.0.0.1:1/0"], "cannot reach"),
    ("memo-url-scheme", ["optimize", "lora", "--memo-url", "memcached://x:1"], "scheme"),
    ("memo-url-db", ["search", "lora", "--memo-url", "redis://127.0.0.1:6379/zero"], "database"),
    ("scheduler-garbage", ["optimize", "lora", "--scheduler", "garbage"], "--scheduler"),
    ("scheduler-bad-port", ["optimize", "lora", "--scheduler", "tcp://head:123456"], "65535"),
    ("dashboard-not-an-address", ["optimize", "lora", "--dashboard-address", "notanaddress"], "--dashboard-address"),
    ("store-empty", ["optimize", "lora", "--store", ""], "--store is empty"),
    ("store-under-a-file", ["optimize", "lora", "--store", "afile/run.zarr"], "is a file"),
    ("store-is-a-file", ["optimize", "lora", "--store", "afile"], "is a file"),
    ("store-unwritable", ["optimize", "lora", "--store", "/proc/mugraph-run.zarr"], "cannot write"),
    ("profile-unwritable", ["optimize", "lora", "--profile", "/proc/mugraph-profile.html"], "cannot write"),
    ("profile-no-directory", ["optimize", "lora", "--profile", "nodir/profile.html"], "does not exist"),
    ("profile-under-a-file", ["optimize", "lora", "--profile", "afile/profile.html"], "is a file"),
    ("report-out-unwritable", ["report", "some.zarr", "--out", "/proc/mugraph-report.html"], "cannot write"),
    # a file written at the end never replaces a store's records, nor a file the user keeps
    ("report-out-inside-a-store", ["report", "st.zarr", "--out", "st.zarr/zarr.json"], "inside the run store"),
    ("report-out-deep-in-a-store", ["report", "st.zarr", "--out", "st.zarr/tasks/zarr.json"], "inside the run store"),
    ("profile-inside-a-store", ["optimize", "lora", "--profile", "st.zarr/ledger.jsonl"], "inside the run store"),
    ("emit-out-inside-a-store", ["emit", "lora", "--out", "st.zarr/k.py"], "inside the run store"),
    ("memo-dir-is-a-file", ["optimize", "rms_norm", "--store", "m.zarr"], "m.zarr.memo, where the run keeps"),
    ("report-out-over-a-users-file", ["report", "some.zarr", "--out", "afile"], "not a file this command wrote"),
    ("profile-over-a-users-file", ["optimize", "lora", "--profile", "afile"], "not a file this command wrote"),
    ("report-empty-store", ["report", ""], "empty"),
    ("show-two-stores", ["show", "a.zarr", "b.zarr"], "2 stores given (a.zarr, b.zarr); name one"),
    ("status-two-stores", ["status", "a.zarr", "b.zarr", "--json"], "2 stores given"),
    ("report-two-stores", ["report", "a.zarr", "b.zarr"], "2 stores given"),
    ("report-no-store", ["report", "missing.zarr"], "no such run store"),
    ("status-empty-store", ["status", ""], "STORE is empty"),
    ("show-no-store", ["show", "missing.zarr"], "no run store"),
    ("deeply-nested-program", ["check", "deep.json"], "nested too deeply"),
    ("deeply-nested-program-search", ["optimize", "deep.json"], "nested too deeply"),
    ("program-without-outputs", ["search", "noout.json"], "no outputs"),
    ("program-without-ops", ["optimize", "noops.json"], "no ops"),
    ("program-calls-sys-exit", ["search", "exits.py"], "sys.exit"),
    ("program-raises-keyboardinterrupt", ["optimize", "interrupts.py"], "KeyboardInterrupt"),
    ("program-reference-exits", ["check", "exits_late.py"], "sys.exit"),
    ("unknown-program", ["optimize", "no_such_program"], "unknown program"),
    ("unknown-program-close", ["optimize", "rms-norm"], "unknown program 'rms-norm' (did you mean 'rms_norm'?)"),
    ("check-unknown-program-close", ["check", "lorra"], "(did you mean 'lora'?)"),
    ("set-unknown-close", ["search", "lora", "--set", "frange=[16]"], "'frange' (did you mean 'franges'?)"),
    # over a preset, `preset` would only rename the config: the option that changes it is named
    ("set-preset", ["optimize", "lora", "--set", 'preset="attention"'], "give --preset attention"),
    ("search-set-preset", ["search", "rms_norm", "--set", "preset=attention"], "give --preset attention"),
    ("explain-set-preset", ["explain", "rms_norm", "--set", "preset=mlp"], "give --preset mlp"),
    ("time-limit", ["optimize", "lora", "--time-limit", "1e400"], "duration"),
    # op kinds the search cannot enumerate: refused by the config's validation, not by a worker
    *[
        (f"{cmd}-{key}-{kind}", [cmd, "lora", "--set", f'{key}=["{kind}","exp"]'], "cannot enumerate")
        for cmd in ("search", "optimize")
        for key in ("kernel_ops", "block_ops")
        for kind in ("input", "output", "customized", "concat")
    ],
    ("set-kernel-ops-twice", ["optimize", "lora", "--set", 'kernel_ops=["exp","exp"]'], "more than once"),
    ("set-block-reduction", ["search", "lora", "--set", 'block_ops=["reduction"]'], "cannot enumerate"),
    ("set-kernel-clamp", ["optimize", "lora", "--set", 'kernel_ops=["clamp"]'], "cannot enumerate"),
    # a dim index counts from 0; a negative one would count from the end
    ("layout-minus-1", ["optimize", "lora", "--layout", "X=-1"], "dim index from 0"),
    ("layout-minus-2", ["optimize", "lora", "--layout", "X=-2"], "dim index from 0"),
    ("layout-name-rlo", ["optimize", "lora", "--layout", "X\u202e=0"], "'X\\u202e' is not allowed"),
    # no GPU here: the device is checked before the store or the memo directory exists
    ("optimize-backend-cupy", ["optimize", "lora", "--backend", "cupy"], "cupy"),
    ("search-backend-cupy", ["search", "lora", "--backend", "cupy"], "cupy"),
    # a program file's code that ends the process in any other way than an error of its own
    ("program-raises-baseexception", ["optimize", "base.py"], "raises Stop"),
    ("program-raises-generatorexit", ["check", "genexit.py"], "raises GeneratorExit"),
    ("program-reference-raises-baseexception", ["search", "base_late.py"], "raises Stop"),
    # names are data: refused when the program is loaded, shown escaped
    *[
        (
            f"{where}-name-{what}",
            ["emit", f"{where}_{what}.json", *(["--check", "--interpret"] * (what == "newline"))],
            f"{where} name",
        )
        for where in ("input", "output", "program")
        for what in ("nul", "newline", "rlo")
    ],
    ("program-name-triple-quote", ["emit", "program_quotes.json", "--check", "--interpret"], "program name"),
    ("py-program-name-rlo", ["optimize", "named_rlo.py"], "program name"),
    ("program-file-name-newline", ["emit", "bad\nname.json"], "named after its file"),
    ("expert-label-newline", ["emit", "expert_newline.json"], "expert name"),
    ("duplicate-output-names", ["emit", "dup_out.json", "--check", "--interpret"], "output name 'O' is taken"),
    ("duplicate-output-names-optimize", ["optimize", "dup_out.json"], "output name 'O' is taken"),
    ("duplicate-input-names", ["emit", "dup_in.json", "--check", "--interpret"], "input name 'X' is taken"),
    # found before the store, the memo server or the cluster exists
    (
        "dashboard-unresolvable",
        ["optimize", "lora", "--dashboard-address", "no-such-host.invalid:8787"],
        "cannot resolve the host",
    ),
    ("dashboard-not-this-machine", ["optimize", "lora", "--dashboard-address", "198.51.100.77:8787"], "cannot listen"),
    ("scheduler-unreachable", ["optimize", "lora", "--scheduler", "tcp://127.0.0.1:1"], "cannot reach the Dask"),
    (
        "scheduler-unresolvable",
        ["optimize", "lora", "--scheduler", "tcp://no-such-host.invalid:8786"],
        "cannot reach the Dask",
    ),
    (
        "scheduler-tls-without-credentials",
        ["optimize", "lora", "--scheduler", "tls://127.0.0.1:1"],
        "client certificate",
    ),
    ("store-newline", ["optimize", "lora", "--store", "a\nb.zarr"], "control character"),
    # the user's path and why, not the name of the store built beside it (.NAME.mugraph-new-PID-HEX)
    (
        "store-name-too-long-to-build-beside",
        ["optimize", "lora", "--store", "ln/" + "x" * 244 + ".zarr"],
        "/" + "x" * 244 + ".zarr: the name is too long (249 bytes, and the store is first built beside it",
    ),
    ("store-name-over-name-max", ["optimize", "lora", "--store", "x" * 256 + ".zarr"], "too long (261 bytes; "),
    # a store needs a name of its own: its memo directory and report are named after it
    ("store-root", ["optimize", "lora", "--store", "/"], "names no directory of its own"),
    ("store-dot", ["optimize", "lora", "--store", "."], "names no directory of its own"),
    ("store-dot-dot", ["optimize", "lora", "--store", "afile/.."], "names no directory of its own"),
    ("report-store-root", ["report", "/"], "names no directory of its own"),
    ("workers-absurd", ["optimize", "lora", "--workers", "99999999999", "--time-limit", "20"], "--workers"),
    ("workers-above-the-bound", ["optimize", "lora", "--workers", str(max_workers() + 1)], "at most"),
    ("memo-key-not-utf8", ["optimize", "lora", "--store", "keyed.zarr"], "not UTF-8"),
    (
        "memo-key-not-utf8-shared-memo",
        ["optimize", "lora", "--store", "keyed.zarr", "--memo-url", "redis://127.0.0.1:1/0"],
        "not UTF-8",
    ),
]
# Rows that hold only where CuPy finds no CUDA device (every machine the suite runs on but a GPU one).
NEEDS_NO_GPU = {"optimize-backend-cupy", "search-backend-cupy"}
HOSTILE = "X\n    os.mkdir('PW')\n    #"  # a comment in the emitted kernel would end at the newline
BAD_NAMES = {"nul": "X\x00Y", "newline": HOSTILE, "rlo": "X\u202eY"}


def _graph_json(inputs: tuple[str, ...] = ("X",), outputs: tuple[str, ...] = ("O",)) -> dict[str, Any]:
    """`exp` of the first input, as many outputs as named; names are set in the JSON as a file would hold
    them (the builder refuses them now, so they are written past it)."""
    g = KernelGraph()
    xs = [g.new_input((16, 16), name=f"in{i}") for i in range(len(inputs))]
    y = g.exp(xs[0])
    for i in range(len(outputs)):
        g.mark_output(y, f"out{i}")
    data = to_json(g)
    named = [op for op in data["ops"] if op["kind"] in ("input", "output")]
    for op, name in zip(named, (*inputs, *outputs), strict=True):
        op["name"] = name
    return data


def _program_json(name: str = "p", experts: tuple[str, ...] = ()) -> str:
    graph = _graph_json()
    return json.dumps(
        {
            "schema": "mugraph.program/1",
            "name": name,
            "reference": graph,
            "experts": {label: graph for label in experts},
        }
    )


def scratch(directory: Path) -> None:
    """The files the cases name."""
    (directory / "afile").write_text("not a directory\n")
    (directory / "st.zarr" / "tasks").mkdir(parents=True)  # a run store's root holds its lock file
    (directory / "st.zarr" / "mugraph.lock").write_text("")
    (directory / "m.zarr.memo").write_text("a file where the memo directory goes\n")
    (directory / "deep.json").write_text("[" * DEEP + "]" * DEEP)
    g = KernelGraph()
    g.new_input((16, 16), name="X")
    (directory / "noout.json").write_text(dumps(g))
    g = KernelGraph()
    g.mark_output(g.new_input((16, 16), name="X"), "O")
    (directory / "noops.json").write_text(dumps(g))
    (directory / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (directory / "interrupts.py").write_text("raise KeyboardInterrupt\n")
    (directory / "exits_late.py").write_text("import sys\n\ndef reference():\n    sys.exit(0)\n\nexperts = {}\n")
    (directory / "base.py").write_text("class Stop(BaseException):\n    pass\n\n\nraise Stop('now')\n")
    (directory / "genexit.py").write_text("raise GeneratorExit\n")
    (directory / "base_late.py").write_text(
        "class Stop(BaseException):\n    pass\n\n\ndef reference():\n    raise Stop\n"
    )
    for what, bad in BAD_NAMES.items():
        (directory / f"input_{what}.json").write_text(json.dumps(_graph_json(inputs=(bad,))))
        (directory / f"output_{what}.json").write_text(json.dumps(_graph_json(outputs=(bad,))))
        (directory / f"program_{what}.json").write_text(_program_json(bad))
    (directory / "program_quotes.json").write_text(_program_json('p"""\nimport os; os.mkdir("PW")\n"""'))
    (directory / "named_rlo.py").write_text(
        "from mugraph.ir import KernelGraph\n\nname = 'lora\\u202egnp.exe'\n\n\ndef reference():\n"
        "    g = KernelGraph()\n    g.mark_output(g.exp(g.new_input((4, 4), name='X')), 'O')\n    return g\n"
    )
    (directory / "bad\nname.json").write_text(json.dumps(_graph_json()))
    (directory / "glue_only.py").write_text(
        "from mugraph.ir import KernelGraph\n\n\ndef reference():\n    g = KernelGraph()\n"
        "    g.mark_output(g.relu(g.new_input((16, 64), name='X')), 'O')\n    return g\n"
    )
    (directory / "expert_newline.json").write_text(_program_json("p", experts=("e\nimport os",)))
    (directory / "dup_out.json").write_text(json.dumps(_graph_json(outputs=("O", "O"))))
    (directory / "dup_in.json").write_text(json.dumps(_graph_json(inputs=("X", "X"))))
    bad_memo_key(directory / "keyed.zarr.memo")


def bad_memo_key(memo: Path) -> None:
    memo.mkdir(parents=True)
    (memo / "memo.key").write_bytes(b"\xff\xfe" + b"\x00" * 40)  # not UTF-8


def default_store(name: str) -> str:
    """The store `optimize NAME` makes when no --store is given."""
    from mugraph.api import default_store as store_of
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import resolve_program
    from mugraph.stages.search.serial import DEFAULT_BUDGET

    return str(store_of(name, make_plan(resolve_program(name), None, {}, DEFAULT_BUDGET).identity))


def listing(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")}


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str, str]:
    """`main(argv)` in this process: (exit status, or the exception that escaped; stdout; stderr)."""
    try:
        main(argv)
        status: object = 0
    except SystemExit as e:
        status = e.code
    except BaseException as e:  # a KeyboardInterrupt or any other escape is a failure of the case
        status = f"escaped {type(e).__name__}: {e}"
    out, err = capsys.readouterr()
    return status, out, err


# waits out the 20-s connect window; "scheduler-unresolvable" says the same line at once
SLOW_CASES = {"scheduler-unreachable"}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [pytest.param(a, n, id=i, marks=[pytest.mark.slow] if i in SLOW_CASES else []) for i, a, n in CASES],
)
def test_bad_input_is_one_line_and_status_2(
    argv: list[str],
    needle: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    if request.node.callspec.id in NEEDS_NO_GPU and cupy_available():
        pytest.skip("this case is about a machine without a usable CUDA device")
    scratch(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path)
    status, out, err = run_cli(argv, capsys)
    lines = err.strip().splitlines()
    if request.node.callspec.id in SLOW_CASES:  # a pipe is told once, as the wait starts, what it waits for
        assert lines[0].startswith("mugraph: waiting for the Dask scheduler at "), err[-2000:]
        lines = lines[1:]
    assert status == 2, (status, err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("mugraph: error: "), err[-2000:]
    assert needle in lines[0], lines[0]
    assert "Traceback" not in err + out
    assert err.isascii() or not any(c in err for c in "\x00\u202e")  # names are shown escaped, never raw
    assert listing(tmp_path) == before  # no store, no memo directory, no report, nothing a name ran


def test_unwritable_working_directory(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir("/proc")  # the default store goes under runs/ here, which cannot be created
    status, _, err = run_cli(["optimize", "lora"], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "cannot write" in err, err
    assert not Path("/proc/runs").exists()


def test_far_too_many_workers_warn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    many = WORKERS_PER_CORE_WARNING * usable_cores() + 1  # allowed, but one line says it is a lot
    status, _, err = run_cli(["optimize", "lora", "--workers", str(many), "--set", "bogus=1"], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 2 and f"warning: --workers {many} is far above" in lines[0], err
    assert not list(tmp_path.iterdir())


def _redis_children() -> list[str]:
    """redis-server processes this one started (a private memo server runs in a session of its own,
    so the parent is what names it)."""
    out = subprocess.run(["pgrep", "-a", "-P", str(os.getpid()), "redis"], capture_output=True, text=True)
    return out.stdout.splitlines()


def test_absurd_workers_are_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused up front, in one line that gives the bound, within seconds: no store, no memo server."""
    monkeypatch.chdir(tmp_path)
    before = set(_redis_children())  # an earlier test's server may still be on its way out
    status, _, err = run_cli(["optimize", "lora", "--workers", "99999999999", "--time-limit", "20"], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and f"at most {max_workers()}" in lines[0], err
    assert not list(tmp_path.iterdir()) and set(_redis_children()) <= before


def test_cases_are_unique() -> None:
    assert len({c[0] for c in CASES}) == len(CASES)
    assert all(json.dumps(c[1]) for c in CASES)


@pytest.mark.parametrize("where", ["file", "environment"])
def test_memo_secret_that_is_not_utf8_is_one_line_and_kept(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A memo.key (or $MUGRAPH_MEMO_KEY) of bytes that are not UTF-8: one line naming it, nothing lost."""
    monkeypatch.chdir(tmp_path)
    key = tmp_path / "memo" / "memo.key"
    key.parent.mkdir()
    secret = bytes(range(128, 200))
    if where == "file":
        monkeypatch.delenv("MUGRAPH_MEMO_KEY", raising=False)
        key.write_bytes(secret)
    else:
        monkeypatch.setenv("MUGRAPH_MEMO_KEY", os.fsdecode(secret))  # held as lone surrogates
    status, out, err = run_cli(["prune", "lora", "--memo-dir", "memo"], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "not UTF-8" in lines[0], err[-2000:]
    assert ("memo.key" if where == "file" else "MUGRAPH_MEMO_KEY") in lines[0] and "Traceback" not in out + err
    assert key.read_bytes() == secret if where == "file" else not key.exists()


def test_bad_memo_key_beside_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    bad_memo_key(tmp_path / f"{default_store('lora')}.memo")
    before = listing(tmp_path)
    status, _, err = run_cli(["optimize", "lora"], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "not UTF-8" in err, err
    assert listing(tmp_path) == before
