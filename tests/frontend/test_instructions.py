"""Per-chat instructions in the page: set before the first message, edited between turns, saved
as a preset and used to start another chat."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import conversation_id, send, start, wait_finished
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser


def _system(stack: Stack) -> str:
    first = stack.provider.chat_requests[-1]["messages"][0]
    return first["content"] if first["role"] == "system" else ""


def _edit(page: Page, instructions: str) -> None:
    page.get_by_role("button", name="Instructions").click()
    box = page.get_by_label("Instructions for this chat")
    box.fill(instructions)
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".instructions-dialog [role=status]")).to_contain_text("Saved")
    page.get_by_role("button", name="Close").click()


def test_instructions_apply_from_the_first_message_change_between_turns_and_become_a_preset(
    page: Page, stack: Stack, username: str
) -> None:
    client = start(page, stack, username)
    _edit(page, "Answer in French.")
    stack.provider.script(text("Bonjour."), text("Hallo."), text("Hallo wieder."))
    send(page, "hi")
    wait_finished(page)
    assert _system(stack) == "Answer in French."
    cid = conversation_id(page)
    assert client.get(f"/api/conversations/{cid}").json()["instructions"] == "Answer in French."

    # Edited between turns: the next reply follows the new text; a reload shows it.
    page.get_by_role("button", name="Instructions").click()
    expect(page.get_by_label("Instructions for this chat")).to_have_value("Answer in French.")
    page.get_by_label("Instructions for this chat").fill("Answer in German.")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".instructions-dialog [role=status]")).to_contain_text("the next reply follows them")
    # Saved as a preset from the same dialog.
    page.get_by_label("Preset name").fill("German")
    page.get_by_role("button", name="Save as preset").click()
    expect(page.locator(".instructions-dialog [role=status]")).to_contain_text('Saved the preset "German"')
    screenshot(page, "instructions-dialog")
    page.get_by_role("button", name="Close").click()
    send(page, "hi again")
    wait_finished(page)
    assert _system(stack) == "Answer in German."

    # A new chat starts without them; the preset brings them back.
    page.get_by_role("button", name="New chat").click()
    page.get_by_role("button", name="Instructions").click()
    expect(page.get_by_label("Instructions for this chat")).to_have_value("")
    page.get_by_label("Preset", exact=True).select_option(label="German")
    page.get_by_role("button", name="Use preset").click()
    expect(page.get_by_label("Instructions for this chat")).to_have_value("Answer in German.")
    page.get_by_role("button", name="Close").click()
    send(page, "third chat")
    wait_finished(page)
    assert _system(stack) == "Answer in German."
    assert conversation_id(page) != cid
