"""Finding a headless browser and its driver for the dashboard tests."""

from __future__ import annotations

import os
import shutil

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVERS = ("chromedriver", "chromium-driver")


def which_executable(names: tuple[str, ...], env: str) -> str | None:
    given = os.environ.get(env)
    if given:
        return given
    return next((p for p in map(shutil.which, names) if p), None)
