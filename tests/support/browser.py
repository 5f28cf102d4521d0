"""A real browser for the web view's tests: Debian's ``chromium`` driven by ``chromium-driver``
through Selenium, headless, one window per test. Missing here: the tests skip saying how to install
it; on CI (which installs it) they fail instead (``slurm_site.needs``)."""

from __future__ import annotations

import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

HOW_TO_ENABLE = "the web view's tests need a browser: apt-get install chromium chromium-driver, and pip install selenium"


def missing() -> Optional[str]:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return HOW_TO_ENABLE
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        return HOW_TO_ENABLE
    return None


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator["object"]:
    """A headless Chromium (its own profile: no cookie of another test), quit afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def text_of(driver, element_id: str) -> str:
    from selenium.common.exceptions import NoSuchElementException

    try:
        return driver.find_element("id", element_id).text
    except NoSuchElementException:
        return ""


def wait_for(what: Callable[[], object], timeout: float, why: str, every: float = 0.5, context: Optional[Callable[[], str]] = None):
    """``what()``'s first true answer within ``timeout`` seconds; else the test fails saying ``why``
    (and what ``context()`` says then: the page's own words, for a failure seen only in CI)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"{why} (after {timeout:.0f} s)" + (f"; the page said: {context()}" if context else ""))


def shoot(driver, name: str, into: Path, also: Optional[Path] = None) -> Path:
    """A screenshot of the page as it is: into the test's directory and, given ``also``, there too
    (``BURST_WEB_SCREENSHOTS``: the docs page's images, refreshed by running the tests)."""
    into.mkdir(parents=True, exist_ok=True)
    path = into / f"{name}.png"
    driver.save_screenshot(str(path))
    if also is not None:
        also.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, also / path.name)
    return path
