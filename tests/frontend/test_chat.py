"""Chatting in the browser: account pages, streaming, stop, failures (versions in place: test_versions)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import (
    composer,
    conversation_id,
    last_assistant,
    send,
    start,
    stored,
    stored_text,
    streamed_text,
    wait_finished,
)
from tests.frontend.conftest import screenshot
from tests.support.api import PASSWORD
from tests.support.browser import Stack, api_client
from tests.support.scripted_provider import text, tool_call

pytestmark = pytest.mark.browser

ANSWER = (
    "Kyoto in spring: **cherry blossoms** along the Philosopher's Path.\n\n"
    "```python\nprint('hanami')\n```\n\n"
    "- Maruyama park\n- Arashiyama\n\n"
    'Unsafe HTML is neutralised: <img src="/nowhere.png" onerror="window.pwned=1">'
    "<script>window.pwned=2</script> done."
)
LONG = " ".join(f"word{n}" for n in range(400))


def test_register_log_in_and_watch_a_reply_stream(page: Page, stack: Stack, username: str) -> None:
    page.goto(f"{stack.base_url}/")
    expect(page).to_have_url(f"{stack.base_url}/login?next=/")
    page.get_by_role("link", name="Create an account").click()
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Repeat the password").fill("something else")
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("alert")).to_have_text("The two passwords differ.")
    page.get_by_label("Repeat the password").fill(PASSWORD)
    screenshot(page, "register")
    page.get_by_role("button", name="Create account").click()
    expect(page).to_have_url(f"{stack.base_url}/")
    expect(page.locator("#empty-state")).to_be_visible()

    stack.provider.script(
        tool_call("generate_report", {"rows": 3, "seed": 2}, text="Let me look that up. "),
        text(ANSWER, token_delay=0.03),
    )
    box = composer(page)
    box.fill("Kyoto in spring?")
    box.press("Shift+Enter")
    box.press_sequentially("Two days only.")
    assert box.input_value() == "Kyoto in spring?\nTwo days only."
    box.press("Enter")

    reply = last_assistant(page)
    expect(reply).to_have_attribute("data-status", "running")
    expect(reply.locator(".md").last).to_contain_text("Kyoto in spring")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(box).to_be_enabled()  # the next message can be drafted meanwhile
    expect(box).to_be_focused()
    screenshot(page, "streaming")
    wait_finished(page)

    cid = conversation_id(page)
    asked = page.locator(".msg.user .msg-body")
    expect(asked).to_have_text("Kyoto in spring?\nTwo days only.", use_inner_text=True)
    expect(page.locator("#conversation-title")).to_have_text("Kyoto in spring?")
    expect(page.locator(f'.conv[data-id="{cid}"]')).to_contain_text("Kyoto in spring?")
    expect(reply.locator("strong")).to_have_text("cherry blossoms")
    expect(reply.locator(".codeblock code.hljs")).to_have_text("print('hanami')")
    expect(reply.locator(".codeblock").get_by_role("button", name="Copy")).to_be_visible()
    # Raw HTML in a reply is sanitized: no handler attribute, no script, nothing ran.
    assert reply.locator("img[onerror], script").count() == 0
    assert page.evaluate("window.pwned") is None
    # The tool call is collapsed, and shows its raw output on expand.
    tool = reply.locator("details.tool")
    expect(tool).to_have_attribute("data-status", "completed")
    expect(tool.locator(".tool-name")).to_have_text("generate_report")
    expect(tool.locator(".tool-output")).to_be_hidden()
    tool.locator("summary").click()
    expect(tool.locator(".tool-output")).to_contain_text("total rows: 3")
    expect(tool.locator(".tool-args")).to_contain_text('"seed": 2')
    expect(box).to_be_enabled()
    expect(page.locator("#context-meter .meter-text")).to_contain_text("% left")
    screenshot(page, "reply-with-tool-and-code")

    message = stored(api_client(stack.base_url, username, register=False), cid)[-1]
    assert streamed_text(page, message["message_id"]) == stored_text(message)


def test_stop_mid_reply_keeps_exactly_what_was_shown(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    stack.provider.script(text(LONG, token_delay=0.03))
    send(page, "Count slowly")
    reply = last_assistant(page)
    expect(reply.locator(".md")).to_contain_text("word20")
    page.get_by_role("button", name="Stop").click()
    wait_finished(page, "cancelled")
    expect(reply.locator(".msg-note")).to_contain_text("Stopped")
    screenshot(page, "stopped")
    message = stored(client, conversation_id(page))[-1]
    assert message["status"] == "cancelled"
    shown = streamed_text(page, message["message_id"])
    assert shown == message["result"]["value"] and 0 < len(shown) < len(LONG)


def test_a_failed_reply_says_why_and_the_chat_goes_on(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    stack.provider.script(text("Half an ans", stream_fault="error_event"))
    send(page, "Answer me")
    reply = wait_finished(page, "failed")
    expect(reply.locator(".msg-note")).to_contain_text("The reply failed")
    expect(reply.locator(".md")).to_have_text("Half an ans")
    screenshot(page, "failed-reply")
    send(page, "Try again")
    expect(wait_finished(page)).to_contain_text("Echo: Try again")
