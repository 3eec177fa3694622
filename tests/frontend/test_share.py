"""Sharing in the browser (issue 22): the owner makes a read-only link from the chat page; a
visitor without an account reads the conversation as it was, rendered like the chat; after
"Revoke" the link shows the not-found page."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import APIResponse, Browser, Page, Route, expect

from tests.frontend.actions import conversation_actions, send, start, wait_finished
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser


def test_a_shared_link_reads_without_an_account_until_revoked(
    sized: Page, browser: Browser, stack: Stack, username: str
) -> None:
    page = sized
    start(page, stack, username)
    stack.provider.script(text("The **area** is $\\pi r^2$."))
    send(page, "Area of a circle?")
    wait_finished(page)

    conversation_actions(page).get_by_role("button", name="Share").click()
    dialog = page.get_by_role("dialog", name="Share this conversation")
    dialog.get_by_role("button", name="Create link").click()
    link = dialog.get_by_role("textbox", name="Share link")
    expect(link).to_have_count(1)
    url = link.input_value()
    assert url.startswith(f"{stack.base_url}/s/")
    stack.provider.script(text("A private follow-up."))
    page.keyboard.press("Escape")
    send(page, "Something I do not share")
    wait_finished(page)

    visitor = browser.new_context(viewport=page.viewport_size)  # no session: no account
    try:
        shared = visitor.new_page()
        shared.goto(url)
        expect(shared.get_by_role("heading", name="Area of a circle?")).to_be_visible()
        messages = shared.locator(".msg")
        expect(messages).to_have_count(2)
        expect(messages.nth(0)).to_contain_text("Area of a circle?")
        expect(messages.nth(1).locator("strong")).to_have_text("area")
        expect(messages.nth(1).locator("math")).to_have_count(1)
        expect(shared.locator("body")).not_to_contain_text("Something I do not share")
        screenshot(shared, f"share-page-{page.viewport_size['width']}")  # type: ignore[index]

        conversation_actions(page).get_by_role("button", name="Share").click()
        dialog = page.get_by_role("dialog", name="Share this conversation")
        expect(dialog.get_by_role("textbox", name="Share link")).to_have_value(url)
        dialog.get_by_role("button", name="Revoke").click()
        expect(dialog.get_by_role("status")).to_have_text("Link revoked: it no longer opens.")
        expect(dialog.get_by_role("textbox", name="Share link")).to_have_count(0)
        response = shared.goto(url)
        assert response is not None and response.status == 404
        expect(shared.get_by_role("heading", name="Share link not found")).to_be_visible()
    finally:
        visitor.close()


def test_a_link_created_while_the_list_still_loads_stays_listed(
    page: Page, stack: Stack, username: str
) -> None:
    start(page, stack, username)
    stack.provider.script(text("Noted."))
    send(page, "Remember this")
    wait_finished(page)
    share = conversation_actions(page).get_by_role("button", name="Share")
    share.click()
    dialog = page.get_by_role("dialog", name="Share this conversation")
    dialog.get_by_role("button", name="Create link").click()
    expect(dialog.get_by_role("textbox", name="Share link")).to_have_count(1)
    page.keyboard.press("Escape")

    # The list is read before the second link exists and arrives after it is made.
    held: list[tuple[Route, APIResponse]] = []

    def read_now_deliver_later(route: Route) -> None:
        if route.request.method == "GET":
            held.append((route, route.fetch()))
        else:
            route.continue_()

    page.route(re.compile(r"/api/conversations/[^/]+/shares$"), read_now_deliver_later)
    share.click()
    dialog.get_by_role("button", name="Create link").click()
    expect(dialog.get_by_role("status")).to_have_text("Link created.")
    assert len(held) == 1
    route, stale = held[0]
    route.fulfill(response=stale)
    expect(dialog.get_by_role("textbox", name="Share link")).to_have_count(2)
