"""Versions in place in the browser: regenerate, edit-and-resend and retry stay in the
conversation (no look-alike entries in the sidebar), keep the files, and the ‹2/3› switcher
moves between versions in place, at desktop and phone sizes."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import conversation_id, last_assistant, send, start, stored, wait_finished
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser


def _send(page: Page, message: str) -> None:
    send(page, message)
    wait_finished(page)


def test_regenerate_and_switch_versions_in_place(sized: Page, stack: Stack, username: str) -> None:
    page = sized
    client = start(page, stack, username)
    stack.provider.script(text("First answer."), text("Second answer, regenerated.", token_delay=0.01))
    _send(page, "Give me an answer")
    cid = conversation_id(page)
    last_assistant(page).get_by_role("button", name="Regenerate").click()
    expect(last_assistant(page)).to_contain_text("Second answer, regenerated.")
    wait_finished(page)
    assert conversation_id(page) == cid
    expect(page.locator(".conv")).to_have_count(1)  # no look-alike conversation in the sidebar
    expect(page.locator(".msg")).to_have_count(2)
    versions = last_assistant(page).get_by_role("group", name="Versions")
    expect(versions).to_contain_text("2/2")
    screenshot(page, f"branch-switcher-{page.viewport_size['width']}")  # type: ignore[index]

    versions.get_by_role("button", name="Previous version").click()
    expect(last_assistant(page)).to_contain_text("First answer.")
    expect(last_assistant(page).get_by_role("group", name="Versions")).to_contain_text("1/2")
    # The shown version is the conversation's: a reload and the next message follow it.
    page.reload()
    expect(last_assistant(page)).to_contain_text("First answer.")
    _send(page, "And then?")
    request = stack.provider.last_request["messages"]
    assert "First answer." in str(request) and "Second answer" not in str(request)
    assert [m["content"] for m in stored(client, cid) if m["role"] == "user"] == [
        "Give me an answer",
        "And then?",
    ]


def test_edit_and_resend_is_a_new_version_of_the_question(sized: Page, stack: Stack, username: str) -> None:
    page = sized
    client = start(page, stack, username)
    send(page, "My budget is 100 euros")
    wait_finished(page)
    send(page, "Suggest a hotel")
    wait_finished(page)
    cid = conversation_id(page)

    page.locator(".msg.user").nth(1).get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Edit your message")
    expect(editor).to_be_focused()
    editor.fill("Suggest a hostel")
    screenshot(page, f"editing-{page.viewport_size['width']}")  # type: ignore[index]
    editor.press("Enter")
    expect(last_assistant(page)).to_contain_text("Echo: Suggest a hostel")
    wait_finished(page)
    assert conversation_id(page) == cid
    users = page.locator(".msg.user .msg-body")
    expect(users).to_have_text(["My budget is 100 euros", "Suggest a hostel"])
    question = page.locator(".msg.user").nth(1)
    expect(question.get_by_role("group", name="Versions")).to_contain_text("2/2")
    question.get_by_role("button", name="Previous version").click()
    expect(users).to_have_text(["My budget is 100 euros", "Suggest a hotel"])
    expect(last_assistant(page)).to_contain_text("Echo: Suggest a hotel")
    assert [m["content"] for m in stored(client, cid) if m["role"] == "user"] == [
        "My budget is 100 euros",
        "Suggest a hotel",
    ]


def test_retry_after_a_failed_reply_replaces_it_in_place(sized: Page, stack: Stack, username: str) -> None:
    page = sized
    start(page, stack, username)
    stack.provider.script(text("Half an ans", stream_fault="error_event"), text("The whole answer."))
    send(page, "Answer me")
    reply = wait_finished(page, "failed")
    reply.get_by_role("button", name="Retry").click()
    expect(last_assistant(page)).to_contain_text("The whole answer.")
    wait_finished(page)
    expect(page.locator(".msg")).to_have_count(2)
    expect(page.locator(".conv")).to_have_count(1)
    versions = last_assistant(page).get_by_role("group", name="Versions")
    expect(versions).to_contain_text("2/2")
    versions.get_by_role("button", name="Previous version").click()
    expect(last_assistant(page).locator(".msg-note")).to_contain_text("The reply failed")


def test_a_search_hit_in_another_version_shows_that_version(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    stack.provider.script(text("The lighthouse keeper's answer."), text("A different answer."))
    send(page, "Tell me a story")
    wait_finished(page)
    last_assistant(page).get_by_role("button", name="Regenerate").click()
    expect(last_assistant(page)).to_contain_text("A different answer.")
    wait_finished(page)
    page.get_by_label("Search conversations by title").fill("lighthouse keeper")
    hits = page.get_by_role("region", name="Messages found").locator(".hit")
    expect(hits).to_have_count(1)
    hits.first.locator("a").click()
    found = last_assistant(page)
    expect(found).to_contain_text("The lighthouse keeper's answer.")
    expect(found).to_have_class(re.compile(r"\bis-found\b"))
    expect(found.get_by_role("group", name="Versions")).to_contain_text("1/2")


def test_versions_cannot_be_switched_while_a_reply_streams(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    slow = " ".join(f"word{n}" for n in range(80))
    stack.provider.script(text("One."), text("Two."), text(slow, token_delay=0.03))
    send(page, "First")
    wait_finished(page)
    last_assistant(page).get_by_role("button", name="Regenerate").click()
    expect(last_assistant(page)).to_contain_text("Two.")
    wait_finished(page)
    send(page, "Second")
    expect(last_assistant(page).locator(".md")).to_contain_text("word3")
    switcher = page.locator(".msg.assistant").first.get_by_role("button", name="Previous version")
    expect(switcher).to_be_hidden()  # while the reply streams, it stays on the path it is written on
    wait_finished(page)
    expect(switcher).to_be_visible()
    cid = conversation_id(page)
    assert [m["result"]["value"] for m in stored(client, cid) if m["role"] == "assistant"] == ["Two.", slow]
