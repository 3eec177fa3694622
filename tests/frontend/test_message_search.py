"""Searching the text of every message from the sidebar: highlighted hits (Chinese included),
another user's messages never among them, and a hit opening its conversation at that message
even when it is older than the first page."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import start
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack, api_client, assistant, seed_conversation, user

pytestmark = pytest.mark.browser


def test_a_hit_is_highlighted_and_opens_its_conversation_at_the_message(
    page: Page, stack: Stack, username: str
) -> None:
    start(page, stack, username)
    messages = [user(f"Question {n}") if n % 2 == 0 else assistant(f"Answer {n}") for n in range(300)]
    messages[5] = assistant("下周我们在北京开会，讨论明年的预算。")
    cid = seed_conversation(stack.database_url, username, "Long planning", messages)
    seed_conversation(stack.database_url, username, "Other", [user("Nothing about that city here.")])
    stranger = f"{username}-stranger"
    api_client(stack.base_url, stranger).close()
    seed_conversation(stack.database_url, stranger, "Not yours", [user("我们也在北京开会")])

    page.reload()
    page.get_by_label("Search conversations by title").fill("北京开会")
    hits = page.get_by_role("region", name="Messages found").locator(".hit")
    expect(hits).to_have_count(1)
    expect(hits.first).to_contain_text("Long planning")
    expect(hits.first.locator("mark")).to_have_text("北京开会")
    screenshot(page, "message-search")

    hits.first.locator("a").click()
    page.wait_for_url(f"{stack.base_url}/c/{cid}")
    found = page.locator('.msg[data-message-id="6"]')
    expect(found).to_have_class(re.compile(r"\bis-found\b"), timeout=20_000)
    expect(found).to_be_in_viewport()
    expect(found).to_contain_text("北京开会")

    page.get_by_label("Search conversations by title").fill("no such words anywhere")
    expect(page.locator("#message-search-status")).to_have_text("No message contains that.")
