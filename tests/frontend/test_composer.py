"""The composer never loses a word: a second Enter does not stop the reply, the box stays usable
while a reply streams (a message sent then waits for the reply to end), a failed send gives the
text back, and on a touch screen Enter adds a line while the Send button sends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, Route, expect

from tests.frontend.actions import composer, conversation_id, last_assistant, start, stored, wait_finished
from tests.frontend.conftest import SIZES, open_page, screenshot
from tests.support.browser import Stack
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser

SLOW = " ".join(f"word{n}" for n in range(120))


@pytest.fixture
def desktop(browser: Browser, stack: Stack) -> Iterator[Page]:
    yield from open_page(browser, stack, **SIZES["desktop"])


@pytest.fixture
def phone(browser: Browser, stack: Stack) -> Iterator[Page]:
    yield from open_page(browser, stack, **SIZES["phone"])


def expect_sent_and_streaming(page: Page, box: Locator) -> None:
    """The message went and its reply streams, the box emptied and still focused for the next."""
    expect(last_assistant(page)).to_have_attribute("data-status", "running")
    expect(box).to_be_focused()
    expect(box).to_have_value("")


def finished_as_one_turn(page: Page, client: httpx.Client) -> list[dict[str, Any]]:
    """Once the reply ends, the conversation holds one question and its completed reply."""
    wait_finished(page)
    messages = stored(client, conversation_id(page))
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[-1]["status"] == "completed"
    return messages


def test_a_second_enter_does_not_stop_the_reply(desktop: Page, stack: Stack, username: str) -> None:
    page = desktop
    client = start(page, stack, username)
    stack.provider.script(text(SLOW, token_delay=0.02))
    box = composer(page)
    box.fill("Count for me")
    box.press("Enter")
    box.press("Enter", delay=0)  # the impatient double press, well within half a second
    expect_sent_and_streaming(page, box)
    finished_as_one_turn(page, client)


def test_a_draft_typed_while_a_reply_streams_survives_and_waits(
    desktop: Page, stack: Stack, username: str
) -> None:
    page = desktop
    client = start(page, stack, username)
    # The second reply holds before its last token until the test releases it, so the third
    # message is sure to be sent while a reply streams.
    held = text(SLOW, token_delay=0.01, clock_tokens=2, stepped=True)
    stack.provider.script(text(SLOW, token_delay=0.03), held)
    box = composer(page)
    box.fill("First question")
    box.press("Enter")
    reply = last_assistant(page)
    expect(reply.locator(".md")).to_contain_text("word5")
    # The box is enabled and keeps the focus while the reply streams: the next draft is typed.
    expect(box).to_be_enabled()
    box.press_sequentially("Second question, drafted meanwhile")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    screenshot(page, "composer-while-streaming")
    wait_finished(page)
    expect(box).to_have_value("Second question, drafted meanwhile")

    # Sent while the next reply streams: it leaves the box at once and goes when the reply ends.
    # The reply's stream connects only after the third message is queued (as on a slow network):
    # its connecting must not take the queued notice away.
    connecting: list[Route] = []

    def hold(route: Route) -> None:
        connecting.append(route)

    page.route("**/api/conversations/*/stream?*", hold)
    box.press("Enter")
    expect(last_assistant(page)).to_have_attribute("data-status", "running")
    box.press_sequentially("Third")
    box.press("Enter")
    expect(box).to_have_value("")
    notice = page.locator("#composer-status")
    expect(notice).to_contain_text("sent when this reply ends")
    for route in connecting:
        route.continue_()
    page.unroute("**/api/conversations/*/stream?*")
    expect(last_assistant(page).locator(".md")).to_contain_text("word119")
    expect(notice).to_contain_text("sent when this reply ends")
    expect(page.locator(".msg.user")).to_have_count(2)
    httpx.post(f"{stack.provider.base_url.removesuffix('/v1')}/_step").raise_for_status()
    expect(page.locator(".msg.user")).to_have_count(3, timeout=20_000)
    wait_finished(page)
    users = [m["content"] for m in stored(client, conversation_id(page)) if m["role"] == "user"]
    assert users == ["First question", "Second question, drafted meanwhile", "Third"]
    assert all(m["status"] == "completed" for m in stored(client, conversation_id(page)))


def _submit(page: Page) -> None:
    """Sends what the box holds: Enter on a desktop, a tap on Send on a touch screen."""
    if page.evaluate("matchMedia('(pointer: coarse)').matches"):
        page.get_by_role("button", name="Send").tap()
    else:
        composer(page).press("Enter")


def test_a_failed_send_gives_the_text_back(sized: Page, stack: Stack, username: str) -> None:
    page = sized
    start(page, stack, username)
    box = composer(page)
    box.fill("Hello")
    _submit(page)
    wait_finished(page)

    def refuse(route: Route) -> None:
        if route.request.method == "POST":
            route.fulfill(
                status=503,
                json={"code": "unavailable", "message": "The service is busy; try again."},
            )
        else:
            route.continue_()

    page.route("**/api/conversations/*/messages", refuse)
    box.fill("A long thought I do not want to type again")
    _submit(page)
    expect(page.locator("#composer-status")).to_contain_text("busy")
    expect(box).to_have_value("A long thought I do not want to type again")
    expect(box).to_be_focused()
    page.unroute("**/api/conversations/*/messages")
    _submit(page)
    wait_finished(page)
    sent = page.locator(".msg.user .msg-body").last
    expect(sent).to_have_text("A long thought I do not want to type again")
    expect(box).to_have_value("")


def test_on_a_phone_enter_adds_a_line_and_the_button_sends(phone: Page, stack: Stack, username: str) -> None:
    page = phone
    client = start(page, stack, username)
    assert page.evaluate("matchMedia('(pointer: coarse)').matches")
    stack.provider.script(text(SLOW, token_delay=0.03))
    box = composer(page)
    box.tap()
    box.press_sequentially("Line one")
    box.press("Enter")
    box.press_sequentially("Line two")
    expect(box).to_have_value("Line one\nLine two")
    expect(page.locator(".msg")).to_have_count(0)
    # The impatient double tap, its second tap after Stop has appeared: it lands where Send was,
    # which must still be Send (a no-op on an empty box), never Stop.
    send_button = page.get_by_role("button", name="Send")
    spot = send_button.bounding_box()
    assert spot is not None
    send_button.tap()
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    page.touchscreen.tap(spot["x"] + spot["width"] / 2, spot["y"] + spot["height"] / 2)
    expect_sent_and_streaming(page, box)
    box.press_sequentially("Next one")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    screenshot(page, "composer-while-streaming-phone")
    messages = finished_as_one_turn(page, client)
    expect(box).to_have_value("Next one")
    assert messages[0]["content"] == "Line one\nLine two"


def test_a_waiting_message_goes_when_the_reply_is_stopped_or_comes_back_to_edit(
    desktop: Page, stack: Stack, username: str
) -> None:
    page = desktop
    client = start(page, stack, username)
    stack.provider.script(text(SLOW, token_delay=0.03), text(SLOW, token_delay=0.03))
    box = composer(page)
    box.fill("First")
    box.press("Enter")
    expect(last_assistant(page).locator(".md")).to_contain_text("word3")
    box.fill("Changed my mind")
    box.press("Enter")
    status = page.locator("#composer-status")
    status.get_by_role("button", name="Edit it").click()
    expect(box).to_have_value("Changed my mind")
    expect(box).to_be_focused()
    box.fill("Second, sent on Stop")
    box.press("Enter")
    expect(status).to_contain_text("sent when this reply ends")
    page.get_by_role("button", name="Stop").click()
    expect(page.locator(".msg.user")).to_have_count(2)
    expect(page.locator(".msg.assistant").first).to_have_attribute("data-status", "cancelled")
    wait_finished(page)
    messages = stored(client, conversation_id(page))
    assert [m["content"] for m in messages if m["role"] == "user"] == ["First", "Second, sent on Stop"]
    assert [m["status"] for m in messages if m["role"] == "assistant"] == ["cancelled", "completed"]
