"""Waiting in tests for something another process does (a page to show a value, a run to reach a
point), with a clear failure naming what never came."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 30.0, interval: float = 0.25) -> Any:
    """The first truthy result of `probe`; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out waiting for {what} (last: {str(last)[:500]})")
