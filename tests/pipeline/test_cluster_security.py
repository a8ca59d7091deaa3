"""The local cluster admits only the run's own client (TLS with a key made for the run), and the memo
secret is never in anything the scheduler holds: a client that could connect would read it there."""

from __future__ import annotations

import json
import logging
import os
import pickle
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Client
from distributed.security import Security

from mugraph.pipeline.cluster import dask_client, local_dashboard, start_workers
from mugraph.pipeline.worker import HEARTBEAT_FAILURE, MEMO_URL_ENV, MugraphPlugin, worker_environment, worker_memo_url

SECRET = "0123456789abcdef" * 4
URL = f"redis://127.0.0.1:1/0?mugraph_key={SECRET}"  # never connected to: the memo opens lazily


@pytest.fixture(scope="module")
def running() -> Iterator[Client]:
    with dask_client(workers=2, dashboard_address=":0") as client:
        client.register_plugin(MugraphPlugin(URL, "numpy"), name="mugraph")
        start_workers(client, worker_environment(URL))
        yield client


def _address(client: Client) -> str:
    return str(client.scheduler_info()["address"])


def _connect(address: str, **kwargs: Any) -> str:
    """Try to connect from another process, as another local user would: 'connected' or the error."""
    code = (
        "import sys\nfrom distributed import Client\n"
        "from distributed.security import Security\n"
        f"kw = {{'security': Security.temporary()}} if {kwargs.get('own_tls', False)!r} else {{}}\n"
        "try:\n"
        f"    c = Client({address!r}, timeout=8, **kw)\n"
        "except BaseException as e:\n"
        "    print('refused', type(e).__name__)\n"
        "else:\n"
        "    print('connected', c.run(lambda: 1))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return out.stdout.strip() or out.stderr[-500:]


def test_the_scheduler_speaks_tls_on_loopback(running: Client) -> None:
    address = _address(running)
    assert address.startswith("tls://127.0.0.1:"), address
    assert len(running.scheduler_info()["workers"]) == 2
    assert all(w.startswith("tls://127.0.0.1:") for w in running.scheduler_info()["workers"])


@pytest.mark.parametrize("how", ["plain-tcp", "tls-without-credentials", "tls-with-its-own-credentials"])
def test_a_client_without_the_runs_credentials_cannot_connect(running: Client, how: str) -> None:
    port = _address(running).rsplit(":", 1)[1]
    address = f"{'tcp' if how == 'plain-tcp' else 'tls'}://127.0.0.1:{port}"
    result = _connect(address, own_tls=how == "tls-with-its-own-credentials")
    assert result.startswith("refused"), result


def test_the_runs_own_credentials_connect(running: Client) -> None:
    """The control: the refusal above is about the credentials, not a broken address."""
    security = running.security
    assert isinstance(security, Security)
    with Client(_address(running), security=security, timeout=30) as other:
        assert other.run(lambda: 1) == dict.fromkeys(running.scheduler_info()["workers"], 1)


def test_the_scheduler_process_holds_the_credentials_in_memory_only(running: Client) -> None:
    """The scheduler runs in a process of its own, which got the run's key through a pipe: it is on
    its command line, in its environment, in its Dask configuration and in the files it has open,
    nowhere."""
    security = running.security
    assert isinstance(security, Security)
    pid = running.run_on_scheduler(os.getpid)
    assert pid != os.getpid()
    key = str(security.get_tls_config_for_role("scheduler")["key"])
    key_lines = [line for line in key.splitlines() if "-----" not in line]
    assert len(key_lines) > 3
    secret = key_lines[len(key_lines) // 2].encode()
    proc = Path(f"/proc/{pid}")
    for part in ("cmdline", "environ"):
        held = (proc / part).read_bytes()
        assert secret not in held and b"PRIVATE KEY" not in held
    for fd in (proc / "fd").iterdir():
        try:
            f = Path(os.readlink(fd))
            data = f.read_bytes() if f.is_absolute() and f.is_file() and f.stat().st_size < 10_000_000 else b""
        except OSError:  # closed meanwhile
            continue
        assert secret not in data, f

    def config(dask_scheduler: Any) -> str:
        import dask.config

        return repr(dask.config.config)

    assert secret.decode() not in running.run_on_scheduler(config)

    def held_key(dask_scheduler: Any) -> str:
        return str(dask_scheduler.security.get_tls_config_for_role("scheduler")["key"])

    assert secret.decode() in running.run_on_scheduler(held_key)  # the control: it has the key, in memory
    assert running.run_on_scheduler(lambda dask_scheduler: dask_scheduler.address) == _address(running)


def test_the_memo_secret_is_in_no_plugin_the_scheduler_holds(running: Client) -> None:
    def scheduler_side(dask_scheduler: Any) -> bytes:
        return pickle.dumps(dict(dask_scheduler.worker_plugins))

    held = running.run_on_scheduler(scheduler_side)
    assert b"mugraph" in held and SECRET.encode() not in held

    def plugin_state(dask_worker: Any) -> str:
        return repr(vars(dask_worker.plugins["mugraph"]))

    for state in running.run(plugin_state).values():
        assert SECRET not in state and "redis://127.0.0.1:1/0" in state


def test_workers_have_the_secret_from_their_environment(running: Client) -> None:
    def memo_url(dask_worker: Any) -> str | None:
        store = dask_worker.plugins["mugraph"].state.memo._backend
        return None if store is None else str(store.url)

    urls = running.run(memo_url)
    assert list(urls.values()) == [URL, URL], urls


def test_worker_memo_url_takes_the_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    public = "redis://head:6379/0"
    monkeypatch.delenv(MEMO_URL_ENV, raising=False)
    monkeypatch.delenv("MUGRAPH_MEMO_KEY", raising=False)
    assert worker_memo_url(public) is None  # no secret: no shared memo, whose verdicts could be forged
    monkeypatch.setenv("MUGRAPH_MEMO_KEY", "k" * 32)
    assert worker_memo_url(public) == f"{public}?mugraph_key={'k' * 32}"
    monkeypatch.setenv(MEMO_URL_ENV, f"{public}?mugraph_key={SECRET}")
    assert worker_memo_url(public) == f"{public}?mugraph_key={SECRET}"
    assert worker_memo_url("redis://other:6379/0") == f"redis://other:6379/0?mugraph_key={'k' * 32}"
    assert worker_memo_url("local") == "local" and worker_memo_url(None) is None


def _outward_address() -> str | None:
    """This machine's address on its default route (a UDP socket's, nothing is sent), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") else address


def test_the_dashboard_at_port_0_listens_on_loopback_only(running: Client) -> None:
    """`--dashboard-address :0` binds 127.0.0.1, as the start line says (Dask alone would bind every
    interface)."""
    link = str(running.dashboard_link)
    assert link.startswith("http://127.0.0.1:"), link
    port = int(link.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    other = _outward_address()
    if other is not None:  # an interface of this machine besides loopback: nothing listens there
        with pytest.raises(OSError):
            socket.create_connection((other, port), timeout=5).close()


def test_the_dashboard_without_a_host_listens_on_loopback() -> None:
    assert local_dashboard(":0") == "127.0.0.1:0" and local_dashboard("8787") == "127.0.0.1:8787"
    assert local_dashboard("0.0.0.0:8787") == "0.0.0.0:8787"
    assert os.environ.get(MEMO_URL_ENV) is None  # the driver's own environment does not carry it


def test_workers_drop_their_heartbeat_failure_at_the_end(running: Client) -> None:
    """A worker that outlives its scheduler by a heartbeat logs the failure with a CommClosedError
    traceback; the filter the plugin installs drops that record, and only that one."""

    def emitted(dask_worker: Any) -> list[bool]:
        log = logging.getLogger("distributed.worker")
        kept = [
            log.filter(log.makeRecord(log.name, logging.ERROR, __file__, 1, msg, (), None))
            for msg in (f"{HEARTBEAT_FAILURE}.", "Compute Failed")
        ]
        return [bool(k) for k in kept]

    assert list(running.run(emitted).values()) == [[False, True], [False, True]]


@pytest.mark.slow
def test_a_time_limit_stop_is_quiet(tmp_path: Path) -> None:
    """gqa's tasks are long: the stop comes while workers are busy, and the cluster closes around them."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mugraph",
            "optimize",
            "gqa",
            "--workers",
            "2",
            "--time-limit",
            "20",
            "--store",
            str(tmp_path / "run.zarr"),
            "--dashboard-address",
            ":0",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "CommClosedError" not in proc.stderr, proc.stderr[-3000:]
    assert "heartbeat" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_an_external_tls_cluster_as_the_document_says(tmp_path: Path) -> None:
    """docs/cluster-security.md: `dask scheduler` and `dask worker --nthreads 1` with TLS, the driver's
    credentials from Dask's configuration in its environment, the memo secret in every environment."""
    from tests.helpers.cli_runs import done, optimize_args

    sec = Security.temporary()
    files = {}
    for name, pem in (
        ("ca.pem", sec.tls_ca_file),
        ("cert.pem", sec.tls_scheduler_cert),
        ("key.pem", sec.tls_scheduler_key),
    ):
        files[name] = tmp_path / name
        files[name].write_text(str(pem))
    tls = [
        "--tls-ca-file",
        str(files["ca.pem"]),
        "--tls-cert",
        str(files["cert.pem"]),
        "--tls-key",
        str(files["key.pem"]),
    ]
    env = {**os.environ, "MUGRAPH_MEMO_KEY": SECRET}
    sched_file = tmp_path / "scheduler.json"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--scheduler-file",
                str(sched_file),
                "--port",
                "0",
                "--dashboard-address",
                ":0",
                *tls,
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    worker_log = tmp_path / "worker.log"
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        assert address.startswith("tls://")
        with worker_log.open("w") as log:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "distributed.cli.dask_worker",
                        address,
                        "--nworkers",
                        "2",
                        "--nthreads",
                        "1",
                        *tls,
                    ],
                    cwd=tmp_path,
                    stdout=log,
                    stderr=log,
                    env=env,
                )
            )
        driver_env = {
            **env,
            "PYTHONUNBUFFERED": "1",
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(files["ca.pem"]),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(files["cert.pem"]),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(files["key.pem"]),
        }
        args = optimize_args("lora", tmp_path / "run.zarr", "--scheduler", address)
        no_creds = subprocess.run(
            [sys.executable, "-m", "mugraph", *args], capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env
        )
        assert no_creds.returncode == 2 and "client certificate" in no_creds.stderr, no_creds.stderr
        assert not (tmp_path / "run.zarr").exists()
        deadline = time.monotonic() + 120
        while True:  # the workers may still be joining
            proc = subprocess.run(
                [sys.executable, "-m", "mugraph", *args],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=600,
                env=driver_env,
            )
            if proc.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        last = done(proc)
        assert last["complete"] and last["mugraphs"], last
        assert "no memo secret" not in worker_log.read_text()  # the workers sealed with the run's secret
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)


def test_each_run_gives_its_own_workers_its_own_secret() -> None:
    """Two runs in one process (two threads calling mugraph.optimize): the second run's plugin once
    replaced the first's secret in a process-wide environment, and its workers kept a memo of their own."""
    other = "redis://127.0.0.1:2/0?mugraph_key=" + "f" * 64
    MugraphPlugin(other, "numpy")
    assert worker_environment(URL) == {MEMO_URL_ENV: URL}
    assert worker_environment(other) == {MEMO_URL_ENV: other}
    assert worker_environment("local") == worker_environment(None) == worker_environment("redis://h:1/0") == {}
