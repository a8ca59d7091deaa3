"""A shared memo cannot be poisoned silently: verdicts in Redis carry an HMAC with the run's secret, so
values flipped or written by anyone without it are ignored and solved again. Real servers, real runs."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from mugraph.storage.memo.auth import TAG_BYTES
from mugraph.storage.memo.layered import LayeredMemo
from mugraph.storage.memo.redis_backend import RedisMemo
from mugraph.storage.memo.redis_binary import find_redis_server
from mugraph.storage.memo.redis_server import EmbeddedRedis
from tests.helpers.cli_runs import done, optimize_args
from tests.helpers.narrow import NARROW

VALID = frozenset({b"Y", b"N", b"U"})
SECRET = "a-secret-the-team-shares-between-runs"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mugraph.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        timeout=300,
    )


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return out


def poison(url: str) -> int:
    """Flip every stored verdict to N: half as a bare N (a foreign writer), half keeping the old tag
    (an altered value). How many keys were changed."""
    client: Any = redis.Redis.from_url(url, protocol=2)
    keys: list[bytes] = sorted(client.keys("*"))
    for i, key in enumerate(keys):
        value: bytes = client.get(key)
        client.set(key, b"N" if i % 2 else b"N" + value[-TAG_BYTES:])
    client.close()
    return len(keys)


def test_a_poisoned_shared_memo_gives_the_unpoisoned_result(tmp_path: Path) -> None:
    env = {"MUGRAPH_MEMO_KEY": SECRET}
    settings = [a for k, v in NARROW["rms_norm"].items() for a in ("--set", f"{k}={json.dumps(v)}")]
    with EmbeddedRedis(tmp_path / "shared") as server:
        search = ["search", "rms_norm", *settings, "--memo-url", server.url, "--json"]
        clean = last_json(cli(*search, cwd=tmp_path, env=env))
        assert clean["solver_calls"] > 0 and clean["mugraphs"] >= 1
        assert poison(server.url) >= clean["solver_calls"]
        proc = cli(
            *optimize_args("rms_norm", tmp_path / "run.zarr", "--workers", "2", "--memo-url", server.url),
            cwd=tmp_path,
            env=env,
        )
        last = done(proc)
        assert last["complete"] and set(last["mugraphs"]) == set(clean["digests"])
        assert last["solver_calls"] > 0  # the poisoned verdicts were solved again
        again = last_json(cli(*search, cwd=tmp_path, env=env))
        assert again["digests"] == clean["digests"] and again["solver_calls"] == 0  # and rewritten, sealed


def test_the_rejected_values_are_shown_as_stored_and_counted_in_all(tmp_path: Path) -> None:
    """The warning shows a rejected value as Redis holds it (its key with the secret's prefix, its raw
    value), and the values rejected are counted in all, not only those of the first lookup that met one."""
    env = {"MUGRAPH_MEMO_KEY": SECRET}
    settings = [a for k, v in NARROW["rms_norm"].items() for a in ("--set", f"{k}={json.dumps(v)}")]
    with EmbeddedRedis(tmp_path / "shared") as server:
        search = ["search", "rms_norm", *settings, "--memo-url", server.url, "--json"]
        last_json(cli(*search, cwd=tmp_path, env=env))
        poison(server.url)
        client: Any = redis.Redis.from_url(server.url, protocol=2)
        held = {k.decode(): client.get(k) for k in client.keys("*")}  # as the poisoned run reads them
        client.close()
        proc = cli(*search, cwd=tmp_path, env=env)
        counted = last_json(proc)["memo_counters"]["garbage"]
    said = [line for line in proc.stderr.splitlines() if "memo values" in line]
    assert len(said) == 2, proc.stderr[-3000:]
    first = re.fullmatch(
        r"mugraph: warning: rejected (\d+) memo values? so far from redis .*: e\.g\. key '([^']+)' = (.+?); .*", said[0]
    )
    assert first is not None, said[0]
    key, shown = first.group(2), first.group(3)
    assert re.fullmatch(r"a[0-9a-f]{12}:mugraph:\S+", key) and key in held, key  # the key as stored, prefixed
    assert shown == repr(held[key][:24]) + ("…" if len(held[key]) > 24 else ""), (shown, held[key])
    assert "untrusted" not in said[0]
    assert 0 < int(first.group(1)) < counted  # the first lookup's, not all of them
    total = f"rejected {counted:,} memo values in all from redis that failed their check"
    assert said[1] == f"mugraph: warning: {total} or were no verdict; each was solved again and overwritten", said[1]


def test_values_from_another_secret_or_none_are_not_trusted(own_redis_url: str) -> None:
    ours = LayeredMemo(RedisMemo(own_redis_url, secret=b"ours"), valid_values=VALID)
    ours.store({"k1": b"Y", "k2": b"N"})
    assert LayeredMemo(RedisMemo(own_redis_url, secret=b"ours"), valid_values=VALID).lookup(["k1", "k2"]) == [
        b"Y",
        b"N",
    ]
    assert LayeredMemo(RedisMemo(own_redis_url, secret=b"theirs"), valid_values=VALID).lookup(["k1"]) == [None]
    client: Any = redis.Redis.from_url(own_redis_url, protocol=2)
    stored: list[bytes] = client.keys("*")
    (key1,) = [k for k in stored if k.endswith(b":k1")]
    client.set(key1, b"N")  # a foreign writer who knows the key layout but not the secret
    backend = RedisMemo(own_redis_url, secret=b"ours")
    memo = LayeredMemo(backend, valid_values=VALID)
    with pytest.warns(RuntimeWarning, match="rejected 1 memo value so far"):
        assert memo.lookup(["k1", "k2"]) == [None, b"N"] and backend.untrusted == 1
    memo.store({"k1": b"Y"})  # solved again: the bad value is repaired
    assert LayeredMemo(RedisMemo(own_redis_url, secret=b"ours"), valid_values=VALID).lookup(["k1"]) == [b"Y"]
    assert "ours" not in repr(RedisMemo(f"{own_redis_url}?mugraph_key=ours"))
    client.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("tls", [False, True], ids=["auth", "tls-and-auth"])
def test_redis_auth_and_tls_in_the_memo_url(tmp_path: Path, tls: bool) -> None:
    port = _free_port()
    listen = ["--port", str(port)]
    scheme, query = "redis", ""
    if tls:
        made = subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "key.pem",
                "-out",
                "cert.pem",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ],
            cwd=tmp_path,
            capture_output=True,
        )
        if made.returncode:
            pytest.skip("no openssl to make a certificate")
        listen = [
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--tls-cert-file",
            "cert.pem",
            "--tls-key-file",
            "key.pem",
            "--tls-ca-cert-file",
            "cert.pem",
            "--tls-auth-clients",
            "no",
        ]
        scheme, query = "rediss", f"?ssl_cert_reqs=required&ssl_ca_certs={tmp_path / 'cert.pem'}"
    server = subprocess.Popen(
        [
            find_redis_server(),
            *listen,
            "--bind",
            "127.0.0.1",
            "--requirepass",
            "s3cret",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if server.poll() is not None:
                    pytest.skip("this redis-server was built without TLS")
                assert time.monotonic() < deadline
                time.sleep(0.05)
        good = last_json(
            cli(
                "prune",
                "lora",
                "--json",
                "--memo-url",
                f"{scheme}://default:s3cret@127.0.0.1:{port}/0{query}",
                cwd=tmp_path,
            )
        )
        assert good["memo_counters"]["remote_errors"] == 0 and good["memo_counters"]["stores"] > 0
        again = last_json(
            cli(
                "prune",
                "lora",
                "--json",
                "--memo-url",
                f"{scheme}://default:s3cret@127.0.0.1:{port}/0{query}",
                cwd=tmp_path,
            )
        )
        assert again["solver_calls"] == 0 and again["memo_counters"]["remote_hits"] > 0
        bad = cli("prune", "lora", "--memo-url", f"{scheme}://default:wrong@127.0.0.1:{port}/0{query}", cwd=tmp_path)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert (
            "refuses the run's credentials" in bad.stderr
            and "wrong" not in bad.stderr
            and "Traceback" not in bad.stderr
        )
    finally:
        server.terminate()
        server.wait(10)
