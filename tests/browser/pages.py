"""Small selenium helpers for the console's pages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def wait(driver: Any, predicate: Callable[[Any], Any], timeout: float = 10.0) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # the page re-renders a table when its data changes: an element found a moment ago may go
    return WebDriverWait(driver, timeout, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,)).until(predicate)


def text(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By
    return driver.find_element(By.CSS_SELECTOR, css).text


def rows(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By
    return driver.find_elements(By.CSS_SELECTOR, css)
