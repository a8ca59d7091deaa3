"""Headless Chromium for the dashboard tests: Debian's `chromium` and `chromium-driver` (scripts/test.sh
installs them). A missing browser fails the tests, it does not skip them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser import BROWSERS, DRIVERS, which_executable

PAGE_TIMEOUT = 30.0
# A script waits for the page's own JavaScript: on a loaded machine Bokeh renders a busy page slowly
# (selenium's default of 30 s was seen to expire at a load average of 15 on 2 cores).
SCRIPT_TIMEOUT = 120.0


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless Chromium driven by selenium (one for the session; the tests open pages in it)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is missing: pip install -e '.[test]' (scripts/test.sh does)")
    binary = which_executable(BROWSERS, "MUGRAPH_CHROMIUM")
    driver_path = which_executable(DRIVERS, "MUGRAPH_CHROMEDRIVER")
    if binary is None or driver_path is None:
        pytest.fail(
            "headless Chromium is missing: apt-get install chromium chromium-driver (scripts/test.sh does), "
            "or set MUGRAPH_CHROMIUM and MUGRAPH_CHROMEDRIVER"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,2000",
        "--hide-scrollbars",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(PAGE_TIMEOUT)
    driver.set_script_timeout(SCRIPT_TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    """Where screenshots are kept: $MUGRAPH_TEST_ARTIFACTS, else the test's tmp_path."""
    out = Path(os.environ.get("MUGRAPH_TEST_ARTIFACTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out
