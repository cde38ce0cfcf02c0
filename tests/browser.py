"""The shared headless-Chromium fixture for browser tests (the report page of issue 21; the annotation
page uses the same interface). `browser` is session-scoped: one Chromium for the whole run, a fresh
user-data-dir, every background fetch Chrome makes on its own turned off (so a network check sees only
the page's requests), and the performance log on, so a test can list every request the page made.

Skips with a clear message when no chromium/chromedriver or no selenium is installed. A test module
uses it with `from browser import browser  # noqa: F401` (tests/ is on sys.path, see tests/conftest.py).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from typing import Any, Iterator

import pytest

CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync")
BINARIES = ("chromium", "chromium-browser", "google-chrome")


def _find() -> tuple[str | None, str | None]:
    chrome = next((shutil.which(b) for b in BINARIES if shutil.which(b)), None)
    return chrome, shutil.which("chromedriver")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("browser tests need selenium: pip install 'mindsim[test]'")
    chrome, driver = _find()
    if not chrome or not driver:
        pytest.skip("browser tests need chromium and chromedriver on PATH: apt-get install -y chromium chromium-driver")
    profile = tempfile.mkdtemp(prefix="mindsim-chrome-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument("--window-size=1400,1000")
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    drv = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def requests_made(drv: Any) -> list[str]:
    """URLs of every request the browser sent since the log was last read (Chrome's performance log)."""
    urls = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls
