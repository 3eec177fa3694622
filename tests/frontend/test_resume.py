"""Reload, close-and-reopen and network loss mid-reply: the page reattaches to the running turn
and continues exactly (no duplicated or missing text); other users' conversations stay closed."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.frontend import actions
from tests.frontend.actions import last_assistant, send, start, wait_finished
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack, api_client, log_in
from tests.support.scripted_provider import text
from tests.support.tcp_proxy import tcp_proxy

pytestmark = pytest.mark.browser

STORY = (
    "## A slow story\n\n"
    + "".join(f"Paragraph {n}: the river 川 flows past stone {n}, quietly.\n\n" for n in range(1, 6))
    + "```text\nthe end\n```\n\nFIN-MARKER"
)


def _check_exact(page: Page, client: httpx.Client) -> None:
    message = actions.stored(client, actions.conversation_id(page))[-1]
    assert message["status"] == "completed"
    assert actions.streamed_text(page, message["message_id"]) == actions.stored_text(message) == STORY
    reply = last_assistant(page)
    assert reply.inner_text().count("FIN-MARKER") == 1
    assert reply.locator("h2").count() == 1 and reply.locator("p", has_text="Paragraph 3:").count() == 1


def test_reload_mid_reply_continues_exactly(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    stack.provider.script(text(STORY, token_delay=0.03))
    send(page, "Tell me a slow story")
    expect(last_assistant(page)).to_contain_text("Paragraph 2")
    page.reload()
    reply = last_assistant(page)
    expect(reply).to_have_attribute("data-status", "running")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(reply).to_contain_text("Paragraph 2")
    screenshot(page, "reattached-after-reload")
    wait_finished(page)
    _check_exact(page, client)


def test_close_and_reopen_mid_reply_continues_exactly(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    stack.provider.script(text(STORY, token_delay=0.03))
    send(page, "Tell me a slow story")
    expect(last_assistant(page)).to_contain_text("Paragraph 1")
    url = page.url
    context = page.context
    page.close()
    reopened = context.new_page()
    reopened.goto(url)
    expect(last_assistant(reopened)).to_have_attribute("data-status", "running")
    wait_finished(reopened)
    _check_exact(reopened, client)


def test_network_loss_mid_reply_reconnects_and_continues_exactly(
    browser: Browser, stack: Stack, username: str
) -> None:
    client = api_client(stack.base_url, username)
    with tcp_proxy(stack.base_url) as proxy:
        context = browser.new_context()
        page = context.new_page()
        log_in(page, proxy.base_url, username)
        stack.provider.script(text(STORY, token_delay=0.03))
        send(page, "Tell me a slow story")
        expect(last_assistant(page)).to_contain_text("Paragraph 1")
        assert proxy.cut() > 0  # the network drops every connection of the page
        expect(page.locator("#composer-status")).to_have_text("Connection lost; reconnecting…")
        screenshot(page, "reconnecting")
        wait_finished(page)
        expect(page.locator("#composer-status")).to_be_hidden()
        _check_exact(page, client)
        context.close()


def test_another_user_cannot_open_the_conversation(page: Page, stack: Stack, username: str) -> None:
    owner = api_client(stack.base_url, f"{username}owner")
    cid = owner.post("/api/conversations", json={"title": "Private plans"}).json()["id"]
    intruder = start(page, stack, username)
    response = page.goto(f"{stack.base_url}/c/{cid}")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", name="Conversation not found")).to_be_visible()
    expect(page.locator("body")).not_to_contain_text("Private plans")
    screenshot(page, "not-found-for-another-user")
    for path in ("", "/messages", "/stream", "/export?format=json"):
        assert intruder.get(f"/api/conversations/{cid}{path}").status_code == 404
    page.goto(f"{stack.base_url}/")
    expect(page.locator("#conversation-list")).not_to_contain_text("Private plans")
