"""The browser test layer: a headless Debian chromium driven by selenium, and screenshots.

Screenshots go into each test's tmp_path and, when ODRADEK_SCREENSHOTS names a directory, are
copied there as well (CI keeps them with the test results)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def _missing() -> str | None:
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if absent:
        return "headless browser tests need " + " and ".join(absent) + " (Debian chromium, " \
               "chromium-driver: see .ci/setup)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "headless browser tests need the selenium package"
    return None


@pytest.fixture
def driver() -> Iterator[Any]:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900"):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    d.set_page_load_timeout(20)
    try:
        yield d
    finally:
        d.quit()


@pytest.fixture
def screenshot(driver: Any, tmp_path: Path, request: pytest.FixtureRequest
               ) -> Callable[[str], Path]:
    """`screenshot("name")` saves the page as tmp_path/name.png (and into $ODRADEK_SCREENSHOTS
    as <test name>-<name>.png when that is set); returns the tmp_path file."""
    def take(name: str) -> Path:
        path = tmp_path / f"{name}.png"
        assert driver.save_screenshot(str(path)), f"screenshot {name} failed"
        target = os.environ.get("ODRADEK_SCREENSHOTS")
        if target:
            out = Path(target)
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out / f"{request.node.name}-{name}.png")
        return path
    return take
