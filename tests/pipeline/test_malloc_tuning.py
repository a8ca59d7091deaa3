"""Worker processes keep malloc thresholds that let a fresh Z3 context per query stay cheap."""

from __future__ import annotations

import os
import subprocess
import sys

from mugraph.pipeline.cluster import dask_client
from mugraph.pipeline.malloc_tuning import restore_thresholds


def _restore_in_child(env: dict[str, str]) -> str:
    code = "from mugraph.pipeline.malloc_tuning import restore_thresholds; print(restore_thresholds())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_thresholds_are_set_only_where_a_variable_froze_them() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    assert _restore_in_child(clean) == "False"
    assert _restore_in_child({**clean, "MALLOC_TRIM_THRESHOLD_": "65536"}) == "True"


def test_local_cluster_workers_start_without_the_trim_variable(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)  # a user's own setting is passed on
    with dask_client(workers=1, dashboard_address=":0") as client:
        got = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert list(got.values()) == [None]


def test_restore_is_a_no_op_without_the_variables(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"):
        monkeypatch.delenv(name, raising=False)
    assert restore_thresholds() is False
