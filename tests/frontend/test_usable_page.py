"""A page everyone can use (issue 35): search snippets read as text, the meter's breakdown
never shows through a dialog, the skip link is the first Tab stop, user messages render their
Markdown (inert), the sidebar's titles keep their width, and a streaming reply is announced
once."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import start
from tests.support.browser import Stack, seed_conversation, user

pytestmark = pytest.mark.browser


def test_a_search_snippet_keeps_the_spaces_around_the_match(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet xray yankee lima mike november"
    seed_conversation(stack.database_url, username, "Alphabet", [user(words)])
    page.get_by_label("Search conversations by title").fill("xray yankee")
    hit = page.get_by_role("region", name="Messages found").locator(".hit-snippet")
    expect(hit.locator("mark")).to_have_text("xray yankee")
    expect(hit).to_contain_text("juliet xray yankee lima")
