"""In a real browser: a hostile `?next=` never takes a user off the site after login, and the
API docs page works with nothing but this server (and under its CSP)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from playwright.sync_api import ConsoleMessage, Page, expect

from tests.support.api import PASSWORD
from tests.support.browser import Stack, api_client

pytestmark = pytest.mark.browser

HOSTILE_NEXT = [
    "/\\evil.example/",
    "//evil.example/",
    "/\\/evil.example/",
    "\\\\evil.example/",
    "https://evil.example/",
    "http:evil.example",
    "javascript:alert(document.domain)",
    "/\t/evil.example/",
    " //evil.example/",
]


def _log_in_through_the_form(page: Page, stack: Stack, username: str, next_path: str) -> None:
    page.goto(f"{stack.base_url}/login?next={quote(next_path, safe='')}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


@pytest.mark.parametrize("hostile", HOSTILE_NEXT)
def test_hostile_next_lands_on_the_home_page(page: Page, stack: Stack, username: str, hostile: str) -> None:
    api_client(stack.base_url, username).close()
    _log_in_through_the_form(page, stack, username, hostile)
    page.wait_for_url(f"{stack.base_url}/")
    expect(page.get_by_label("Message", exact=True)).to_be_visible()


def test_a_same_site_next_is_followed(page: Page, stack: Stack, username: str) -> None:
    client = api_client(stack.base_url, username)
    cid = client.post("/api/conversations", json={"title": "Back here"}).json()["id"]
    client.close()
    _log_in_through_the_form(page, stack, username, f"/c/{cid}?from=login#end")
    page.wait_for_url(f"{stack.base_url}/c/{cid}?from=login#end")


def test_api_docs_load_only_from_this_server(page: Page, stack: Stack) -> None:
    requested: list[str] = []
    refused: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    def console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            refused.append(message.text)

    page.on("console", console)
    page.on("requestfailed", lambda request: refused.append(f"failed: {request.url}"))
    page.goto(f"{stack.base_url}/docs")
    operations = page.locator(".opblock")
    expect(operations.first).to_be_visible()
    assert operations.count() >= 20
    expect(page.locator(".info .title")).to_contain_text("Chat Shell")
    foreign = [url for url in requested if not url.startswith((stack.base_url, "data:", "blob:"))]
    assert not foreign, foreign
    assert not refused, refused
