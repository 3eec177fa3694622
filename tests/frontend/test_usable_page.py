"""A page everyone can use (issue 35): search snippets read as text, the meter's breakdown
never shows through a dialog, the skip link is the first Tab stop, user messages render their
Markdown (inert), the sidebar's titles keep their width, and a streaming reply is announced
once."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import composer, send, start, wait_finished
from tests.support.browser import Stack, seed_conversation, user
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser


def test_a_search_snippet_keeps_the_spaces_around_the_match(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet xray yankee lima mike november"
    seed_conversation(stack.database_url, username, "Alphabet", [user(words)])
    page.get_by_label("Search conversations by title").fill("xray yankee")
    hit = page.get_by_role("region", name="Messages found").locator(".hit-snippet")
    expect(hit.locator("mark")).to_have_text("xray yankee")
    expect(hit).to_contain_text("juliet xray yankee lima")


def test_a_dialog_closes_the_meters_breakdown(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    stack.provider.script(text("Noted."))
    send(page, "Hello")
    wait_finished(page)
    breakdown = page.locator("#meter-details")
    meter = page.locator("#context-meter .meter-button")
    dialogs = {"What the model sees": "What the model sees", "Share": "Share this conversation"}
    for opener, name in dialogs.items():
        meter.click()
        expect(breakdown).to_be_visible()
        page.get_by_role("button", name=opener, exact=True).click()
        dialog = page.get_by_role("dialog", name=name)
        expect(dialog).to_be_visible()
        expect(breakdown).to_be_hidden()
        expect(meter).to_have_attribute("aria-expanded", "false")
        page.keyboard.press("Escape")
        expect(dialog).to_be_hidden()


def test_the_skip_link_is_the_first_tab_stop(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    expect(composer(page)).to_be_enabled()  # the page's script has run
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to the message box")).to_be_focused()
    page.keyboard.press("Enter")
    expect(composer(page)).to_be_focused()
    page.get_by_role("button", name="New chat").click()
    expect(composer(page)).to_be_focused()  # a new chat still starts in the message box
