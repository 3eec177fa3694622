"""Browser tests: one backend + scripted provider per session, a fresh browser context per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.support.browser import Stack, launch_chromium, serve_fresh_stack

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
# A small window, so the meter visibly moves within a few turns.
CONTEXT_WINDOW = 8192

_names = itertools.count(1)


@pytest.fixture(scope="session")
def stack(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("browser")
    with serve_fresh_stack(sqlite_template, directory, context_window=CONTEXT_WINDOW) as served:
        yield served


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Browser]:
    """Per module, started after the servers: while Playwright's sync API runs it keeps an event
    loop registered on the main thread, which async tests of other modules must not meet."""
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        yield browser
        browser.close()


# The sizes the checks use: a laptop, and a phone (touch, so `pointer: coarse`).
SIZES: dict[str, dict[str, Any]] = {
    "desktop": {"viewport": {"width": 1440, "height": 900}},
    "phone": {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True},
}


def open_page(browser: Browser, stack: Stack, **options: Any) -> Iterator[Page]:
    """A fresh browser context (no cookies); uncaught page errors fail the test."""
    stack.provider.reset()
    context = browser.new_context(**options)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def page(browser: Browser, stack: Stack) -> Iterator[Page]:
    yield from open_page(browser, stack, viewport={"width": 1280, "height": 860})


@pytest.fixture(params=sorted(SIZES))
def sized(request: pytest.FixtureRequest, browser: Browser, stack: Stack) -> Iterator[Page]:
    """`page` at each of SIZES in turn."""
    yield from open_page(browser, stack, **SIZES[request.param])


@pytest.fixture
def username() -> str:
    return f"user{next(_names)}"


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
