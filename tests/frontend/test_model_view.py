"""'What the model sees' in the browser (issue 19): the dialog lists the last request exactly as
the scripted provider received it, entry by entry, with a token total equal to that request
counted in the profile's units; the chat's instructions are their own entry; a turn that never
reached the model says so."""

from __future__ import annotations

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.frontend.actions import send, start, wait_finished
from tests.frontend.conftest import CONTEXT_WINDOW, screenshot
from tests.support.browser import Stack
from tests.support.scripted_provider import counted_as_sent, text, tool_call

pytestmark = pytest.mark.browser


def open_model_view(page: Page) -> Locator:
    page.locator("#context-meter .meter-button").focus()
    page.get_by_role("button", name="What the model sees").click()
    dialog = page.get_by_role("dialog", name="What the model sees")
    expect(dialog).to_be_visible()
    return dialog


def a_turn_with_a_tool_round(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    stack.provider.script(tool_call("generate_report", {"rows": 2}), text("Two rows, both fine."))
    send(page, "Make me a small report.")
    wait_finished(page)


def test_the_model_view_shows_the_request_the_provider_received(
    page: Page, stack: Stack, username: str
) -> None:
    a_turn_with_a_tool_round(page, stack, username)
    body = stack.provider.chat_requests[-1]

    dialog = open_model_view(page)
    entries = dialog.locator(".model-entry")
    expect(entries.first).to_be_visible()
    sent = body["messages"]
    tools = body.get("tools", [])
    expect(entries).to_have_count(len(sent) + len(tools))
    sources = [entries.nth(i).get_attribute("data-source") for i in range(len(sent))]
    assert sources[-3:] == ["current_input", "history", "tool_output"], sources
    for index, message in enumerate(sent):
        if message["role"] in ("user", "tool"):
            expect(entries.nth(index).locator(".model-entry-body")).to_have_text(message["content"])
    for index, tool in enumerate(tools, start=len(sent)):
        expect(entries.nth(index)).to_contain_text(tool["function"]["name"])
    tokens = [int(entries.nth(i).get_attribute("data-tokens") or 0) for i in range(entries.count())]
    total = dialog.locator(".model-view-total")
    framing = counted_as_sent(body) - sum(tokens)
    assert 0 < framing < 20, (framing, tokens)
    expect(total).to_have_attribute("data-total", str(counted_as_sent(body)))
    expect(total).to_contain_text(f"{counted_as_sent(body):,} tokens in this request")
    screenshot(page, "model-view-request")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


def test_a_turn_refused_before_any_model_call_is_named_in_the_model_view(
    page: Page, stack: Stack, username: str
) -> None:
    start(page, stack, username)
    calls = len(stack.provider.chat_requests)
    # Alone more than the whole window: refused before the model is called.
    send(page, "apple " * (CONTEXT_WINDOW + 500))
    wait_finished(page, status="failed")
    assert len(stack.provider.chat_requests) == calls
    dialog = open_model_view(page)
    expect(dialog.locator(".model-view-note")).to_contain_text("ended before the model was called")
    expect(dialog.locator(".model-entry")).to_have_count(0)


def test_the_chats_instructions_are_their_own_entry_in_the_model_view(
    page: Page, stack: Stack, username: str
) -> None:
    client = start(page, stack, username)
    created = client.post("/api/conversations", json={"title": "fr", "instructions": "Answer in French."})
    page.goto(f"{stack.base_url}/c/{created.json()['id']}")
    stack.provider.script(text("Bonjour."))
    send(page, "Hi")
    wait_finished(page)
    body = stack.provider.chat_requests[-1]
    assert body["messages"][0]["content"].endswith("Answer in French.")

    dialog = open_model_view(page)
    instructions = dialog.locator('.model-entry[data-source="instructions"]')
    expect(instructions).to_have_count(1)
    expect(instructions.locator(".model-entry-body")).to_have_text("Answer in French.")
    expect(instructions).to_contain_text("This chat's instructions")
    total = dialog.locator(".model-view-total")
    expect(total).to_have_attribute("data-total", str(counted_as_sent(body)))


def test_the_next_request_is_shown_before_the_send_and_is_what_the_next_turn_sends(
    page: Page, stack: Stack, username: str
) -> None:
    a_turn_with_a_tool_round(page, stack, username)
    calls = len(stack.provider.chat_requests)

    def entries_of(dialog: Locator) -> list[tuple[str | None, str | None, str]]:
        entries = dialog.locator(".model-entry")
        expect(entries.first).to_be_visible()
        return [
            (
                entries.nth(i).get_attribute("data-source"),
                entries.nth(i).get_attribute("data-tokens"),
                entries.nth(i).locator(".model-entry-body").inner_text(),
            )
            for i in range(entries.count())
        ]

    dialog = open_model_view(page)
    dialog.get_by_role("button", name="Next request").click()
    expect(dialog.get_by_role("button", name="Next request")).to_have_attribute("aria-pressed", "true")
    expect(dialog.locator(".model-view-total")).to_contain_text("before your next message")
    upcoming = entries_of(dialog)
    upcoming_total = int(dialog.locator(".model-view-total").get_attribute("data-total") or 0)
    assert len(stack.provider.chat_requests) == calls  # no model was called to show it
    screenshot(page, "model-view-next-request")
    page.keyboard.press("Escape")

    stack.provider.script(text("Fine."))
    send(page, "Thanks, and now?")
    wait_finished(page)
    body = stack.provider.chat_requests[-1]
    dialog = open_model_view(page)
    sent = entries_of(dialog)
    current = [entry for entry in sent if entry[0] == "current_input"]
    assert [entry for entry in sent if entry[0] != "current_input"] == upcoming
    assert upcoming_total + int(current[0][1] or 0) == counted_as_sent(body)
