"""Long conversations page in on scroll; the sidebar (search, rename, delete, paging); export;
keyboard use, the narrow (mobile) layout and the dark theme."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tests.frontend.actions import (
    composer,
    conversation_actions,
    conversation_id,
    last_assistant,
    send,
    start,
    stored,
    wait_finished,
)
from tests.frontend.conftest import screenshot
from tests.support.api import PASSWORD
from tests.support.browser import (
    Stack,
    api_client,
    append_turn_events,
    assistant,
    complete_turn,
    seed_conversation,
    seed_running_turn,
    user,
)
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser


def numbered(count: int) -> list[dict]:
    return [user(f"Question {n}") if n % 2 == 0 else assistant(f"Answer {n}") for n in range(count)]


# The most messages the page holds at once: a window around the view (issue 35).
WINDOW = 80
DRAWN_IDS = "() => [...document.querySelectorAll('#messages > .msg')].map((m) => Number(m.dataset.messageId))"
FIRST_IN_VIEW = """el => {
  const top = el.getBoundingClientRect().top;
  const drawn = [...el.querySelectorAll('#messages > .msg')];
  const first = drawn.find((m) => m.getBoundingClientRect().bottom > top);
  return Number(first.dataset.messageId);
}"""
AT_THE_END = "el => el.scrollHeight - el.scrollTop <= el.clientHeight + 1"


def drawn_ids(page: Page) -> list[int]:
    """The messages in the page, in order, each checked to follow the one before it."""
    ids: list[int] = page.evaluate(DRAWN_IDS)
    assert ids == list(range(ids[0], ids[0] + len(ids))), ids
    assert len(ids) <= WINDOW, len(ids)
    return ids


def scroll_to_the_top(page: Page) -> None:
    """Jumps to the top of the transcript until the first message is drawn there."""
    transcript = page.locator("#transcript")
    for _ in range(30):
        transcript.evaluate("el => { el.scrollTop = 0; }")
        page.wait_for_timeout(150)
        if drawn_ids(page)[0] == 1 and transcript.evaluate("el => el.scrollTop") == 0:
            return
    assert drawn_ids(page)[0] == 1


def test_a_long_conversation_opens_at_the_end_and_pages_in_older_messages(
    page: Page, stack: Stack, username: str
) -> None:
    """Scrolling to the top loads older pages and back down draws the newer ones again: each
    time in order, without gaps or duplicates, the view steady, and never more than a window of
    messages in the page."""
    start(page, stack, username)
    cid = seed_conversation(stack.database_url, username, "Very long", numbered(300))
    page.goto(f"{stack.base_url}/c/{cid}")
    transcript = page.locator("#transcript")
    messages = page.locator(".msg")
    expect(messages.last).to_contain_text("Answer 299")
    expect(messages).to_have_count(40)
    assert page.evaluate("window.chatShell.firstPageMs") > 0
    scroll_to_the_top(page)
    expect(messages.first).to_contain_text("Question 0")

    # A screen at a time down to the end: each step moves the view by about a screen.
    seen = set(drawn_ids(page))
    first = transcript.evaluate(FIRST_IN_VIEW)
    for _ in range(200):
        if drawn_ids(page)[-1] == 300 and transcript.evaluate(AT_THE_END):
            break
        transcript.evaluate("el => { el.scrollTop += el.clientHeight; }")
        page.wait_for_timeout(60)
        seen |= set(drawn_ids(page))
        now = transcript.evaluate(FIRST_IN_VIEW)
        assert 0 <= now - first <= 20, (first, now)
        first = now
    assert seen == set(range(1, 301))
    expect(messages.last).to_contain_text("Answer 299")
    expect(messages.last).to_be_in_viewport()


def test_a_reply_written_while_the_reader_is_far_up_is_whole_back_at_the_end(
    page: Page, stack: Stack, username: str
) -> None:
    """The reply being written leaves the page with the newest messages when the reader scrolls
    to the top of a long conversation; it goes on receiving its stream meanwhile, and scrolling
    back down shows it with everything written, then finished."""
    start(page, stack, username)
    cid = seed_conversation(stack.database_url, username, "Very long", numbered(300))
    turn_id, reply_id = seed_running_turn(stack.database_url, cid, "And the last day?")
    started = {"turn_id": turn_id, "message_id": reply_id, "model": "m", "profile": "m"}
    append_turn_events(
        stack.database_url, turn_id, [("turn.started", started), ("message.delta", {"text": "Day one: "})]
    )
    page.goto(f"{stack.base_url}/c/{cid}")
    reply = page.locator(f'.msg[data-message-id="{reply_id}"]')
    expect(reply).to_contain_text("Day one:")
    scroll_to_the_top(page)
    expect(reply).to_have_count(0)
    append_turn_events(stack.database_url, turn_id, [("message.delta", {"text": "the temples."})])
    streamed = f"window.chatShell.streamedText({reply_id})"
    for _ in range(100):
        if page.evaluate(streamed) == "Day one: the temples.":
            break
        page.wait_for_timeout(100)
    assert page.evaluate(streamed) == "Day one: the temples."
    transcript = page.locator("#transcript")
    for _ in range(60):
        transcript.evaluate("el => { el.scrollTop = el.scrollHeight; }")
        page.wait_for_timeout(100)
        if drawn_ids(page)[-1] == reply_id:
            break
    expect(reply).to_contain_text("Day one: the temples.")
    expect(reply).to_have_attribute("data-status", "running")

    answer = "Day one: the temples. Day two: the hills."
    result = {"value": answer, "blocks": [{"type": "text", "text": answer}]}
    complete_turn(stack.database_url, (cid, turn_id, reply_id), " Day two: the hills.", result)
    expect(reply).to_have_attribute("data-status", "completed")
    expect(reply.locator(".msg-body")).to_have_text(answer)


def test_sidebar_pages_searches_renames_and_deletes(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    for n in range(45):
        client.post("/api/conversations", json={"title": f"{'Alpha' if n % 3 == 0 else 'Beta'} trip {n}"})
    page.reload()
    items = page.locator("#conversation-list .conv")
    expect(items.first).to_contain_text("trip 44")  # newest first
    page.locator("#conversation-scroller").evaluate("el => { el.scrollTop = el.scrollHeight; }")
    expect(items).to_have_count(45)

    page.get_by_label("Search conversations by title").fill("alpha")
    expect(items).to_have_count(15)
    for title in items.locator(".conv-title").all_inner_texts():
        assert title.startswith("Alpha")
    page.get_by_label("Search conversations by title").fill("no such title")
    expect(page.locator("#conversation-empty")).to_have_text("No conversation title matches.")
    page.get_by_label("Search conversations by title").fill("")
    expect(items.first).to_contain_text("trip 44")

    target = items.filter(has_text="Beta trip 43")
    target.get_by_role("button", name="Rename “Beta trip 43”").click()
    rename = page.get_by_label("New title")
    rename.fill("Gamma: the renamed trip")
    rename.press("Enter")
    expect(page.locator(".conv-title", has_text="Gamma: the renamed trip")).to_be_visible()
    renamed_id = int(items.filter(has_text="Gamma").get_attribute("data-id") or 0)
    assert client.get(f"/api/conversations/{renamed_id}").json()["title"] == "Gamma: the renamed trip"
    screenshot(page, "sidebar")

    # Deleting asks nothing: the conversation goes at once, with an Undo for a few seconds.
    with page.expect_response(lambda response: response.request.method == "DELETE"):
        items.filter(has_text="Gamma").get_by_role("button", name="Delete “Gamma: the renamed trip”").click()
    expect(page.locator(".conv-title", has_text="Gamma")).to_have_count(0)
    expect(page.get_by_role("status").filter(has_text="Deleted “Gamma: the renamed trip”.")).to_be_visible()
    assert client.get(f"/api/conversations/{renamed_id}").status_code == 404

    # Opening a conversation from the list is client-side, and the URL is a deep link.
    chosen = items.filter(has_text="Alpha trip 42")
    chosen_id = chosen.get_attribute("data-id")
    chosen.locator("a").click()
    expect(page).to_have_url(f"{stack.base_url}/c/{chosen_id}")
    expect(page.locator("#conversation-title")).to_have_text("Alpha trip 42")
    page.go_back()
    expect(page.locator("#conversation-title")).to_have_text("New conversation")


def test_export_markdown_and_json_downloads(page: Page, stack: Stack, username: str, tmp_path: Path) -> None:
    start(page, stack, username)
    stack.provider.script(text("**Tokyo** is big."))
    send(page, "Tell me about Tokyo")
    wait_finished(page)
    conversation_actions(page).locator("#export-menu summary").click()
    with page.expect_download() as markdown:
        page.get_by_role("link", name="Markdown (.md)").click()
    saved = tmp_path / "export.md"
    markdown.value.save_as(saved)
    exported = saved.read_text()
    assert markdown.value.suggested_filename == "Tell me about Tokyo.md"
    assert "## You" in exported and "Tell me about Tokyo" in exported and "**Tokyo** is big." in exported
    conversation_actions(page).locator("#export-menu summary").click()
    with page.expect_download() as as_json:
        page.get_by_role("link", name="JSON (.json)").click()
    document = json.loads(Path(as_json.value.path()).read_text())
    assert [m["role"] for m in document["messages"]] == ["user", "assistant"]
    assert document["conversation"]["id"] == conversation_id(page)


def test_a_message_sent_while_the_conversation_still_loads_goes_to_that_conversation(
    page: Page, stack: Stack, username: str
) -> None:
    """Typing right after a reload, before the messages have arrived, must not start a new chat."""
    client = start(page, stack, username)
    send(page, "First")
    wait_finished(page)
    cid = conversation_id(page)
    held: list[Route] = []

    def hold_first_page(route: Route) -> None:
        if route.request.method == "GET" and not held:
            held.append(route)
        else:
            route.continue_()

    page.route(
        lambda url: url.startswith(f"{stack.base_url}/api/conversations/{cid}/messages?"), hold_first_page
    )
    page.reload()
    composer(page).fill("Second")
    composer(page).press("Enter")
    for _ in range(100):
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the page never asked for the conversation's messages"
    page.wait_for_timeout(300)  # the send is pressed and waiting while the messages are held
    held[0].continue_()
    wait_finished(page)
    expect(page.locator(".msg.user .msg-body")).to_have_text(["First", "Second"])
    assert conversation_id(page) == cid
    assert [m["content"] for m in stored(client, cid) if m["role"] == "user"] == ["First", "Second"]
    assert [c["id"] for c in client.get("/api/conversations").json()["items"]] == [cid]


def test_keyboard_only_chat(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    expect(composer(page)).to_be_enabled()
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # the skip link
    expect(composer(page)).to_be_focused()
    page.keyboard.type("Hello from the keyboard")
    page.keyboard.press("Enter")
    wait_finished(page)
    expect(composer(page)).to_be_focused()  # back in the box once the reply is written
    page.reload()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to the message box")).to_be_focused()
    page.keyboard.press("Enter")
    expect(composer(page)).to_be_focused()
    page.keyboard.type("Second line")
    page.keyboard.press("Enter")
    wait_finished(page)
    expect(page.locator(".msg.user .msg-body")).to_have_text(["Hello from the keyboard", "Second line"])
    # Every control reached by Tab has a name, and focus is visible.
    unnamed = page.evaluate(
        """() => [...document.querySelectorAll('button, a[href], input, textarea, summary')]
            .filter(el => el.offsetParent !== null)
            .filter(el => !(el.getAttribute('aria-label') || el.textContent.trim()
                            || el.labels?.length || el.title))
            .map(el => el.outerHTML.slice(0, 80))"""
    )
    assert unnamed == []
    page.locator("#context-meter .meter-button").focus()
    outline = page.locator("#context-meter .meter-button").evaluate("el => getComputedStyle(el).outlineStyle")
    assert outline != "none"
    page.keyboard.press("Enter")
    expect(page.locator("#meter-details")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#context-meter .meter-button")).to_have_attribute("aria-expanded", "false")


def test_narrow_screen_and_dark_theme(browser: Browser, stack: Stack, username: str) -> None:
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, color_scheme="dark", is_mobile=True, has_touch=True
    )
    page = context.new_page()
    client = start(page, stack, username)
    client.post("/api/conversations", json={"title": "Pocket plans"})
    page.reload()
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(21, 24, 29)"  # the dark palette, from the system setting
    expect(page.locator("#sidebar")).not_to_be_in_viewport()
    send(page, "Hi from a phone")
    wait_finished(page)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390  # nothing overflows sideways
    screenshot(page, "mobile-dark")
    page.get_by_role("button", name="Show conversations").click()
    expect(page.locator("#sidebar")).to_be_in_viewport()
    expect(page.locator("#sidebar")).to_contain_text("Pocket plans")
    expect(page.locator("#sidebar")).to_have_css("transform", "none")  # the slide-in has ended
    screenshot(page, "mobile-dark-drawer")
    page.locator("#sidebar .conv", has_text="Pocket plans").locator("a").click()
    expect(page.locator("#sidebar")).not_to_be_in_viewport()
    expect(page.locator("#conversation-title")).to_have_text("Pocket plans")
    context.close()


# Why document.activeElement cannot be seen, or "" when it can: a zero box, hidden (display,
# visibility, opacity), or behind an open modal dialog's backdrop. Tab past the first or last stop
# (of the page, or of a modal dialog) reaches the browser's own controls: the page has no focus.
_FOCUS_PROBLEM = """() => {
    if (!document.hasFocus()) return '';
    const el = document.activeElement;
    const name = el ? `${el.tagName.toLowerCase()}#${el.id}.${el.className} "${
        (el.getAttribute('aria-label') || el.textContent || '').trim().slice(0, 40)}"` : 'none';
    if (!el || el === document.body) return `focus dropped to the page (${name})`;
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) return `zero box: ${name}`;
    if (!el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return `hidden: ${name}`;
    const dialogs = [...document.querySelectorAll('dialog[open]')].filter(d => d.matches(':modal'));
    if (dialogs.length && !dialogs.at(-1).contains(el)) return `behind the open dialog: ${name}`;
    return '';
}"""


def assert_focus_shown(page: Page, step: str) -> None:
    problem = page.evaluate(_FOCUS_PROBLEM)
    assert not problem, f"{step}: {problem}"


def tab_to(page: Page, selector: str, *, backwards: bool = False, limit: int = 80) -> None:
    """Presses Tab (or Shift+Tab) until the focus is on `selector`, the focus shown at each press."""
    for _ in range(limit):
        page.keyboard.press("Shift+Tab" if backwards else "Tab")
        assert_focus_shown(page, f"tabbing to {selector}")
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{selector} not reached in {limit} presses of Tab")


def test_the_main_flow_with_the_keyboard_alone(page: Page, stack: Stack, username: str) -> None:
    """Log in, new chat, send, stop, regenerate, switch version, search, the model view, log out:
    the keyboard only, the focus always on something shown (inside the dialog while one is open)."""
    api_client(stack.base_url, username).close()
    page.goto(f"{stack.base_url}/login")
    assert_focus_shown(page, "the login page")
    page.keyboard.type(username)
    page.keyboard.press("Tab")
    assert_focus_shown(page, "the password")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{stack.base_url}/")
    expect(composer(page)).to_be_enabled()

    tab_to(page, "#new-conversation")
    page.keyboard.press("Enter")
    expect(composer(page)).to_be_focused()
    stack.provider.script(text("A first answer that goes on", hang=True), text("The second version."))
    page.keyboard.type("Tell me about otters")
    page.keyboard.press("Enter")
    expect(page.locator(".msg.assistant").last).to_contain_text("goes on")
    assert_focus_shown(page, "sent")

    tab_to(page, "#stop")
    page.keyboard.press("Enter")
    wait_finished(page, "cancelled")
    assert_focus_shown(page, "stopped")

    tab_to(page, '.msg.assistant [data-action="regenerate"]', backwards=True)
    page.keyboard.press("Enter")
    reply = wait_finished(page)
    expect(reply).to_contain_text("The second version.")
    assert_focus_shown(page, "regenerated")

    tab_to(page, '.msg.assistant [aria-label="Previous version"]', backwards=True)
    page.keyboard.press("Enter")
    expect(last_assistant(page)).to_contain_text("goes on")
    expect(last_assistant(page).locator(".versions-position")).to_have_text("1/2")
    assert_focus_shown(page, "switched version")

    tab_to(page, "#conversation-search", backwards=True)
    page.keyboard.type("otters")
    hits = page.get_by_role("region", name="Messages found").locator(".hit a")
    expect(hits.first).to_be_visible()
    tab_to(page, ".hit a")
    page.keyboard.press("Enter")
    expect(page.locator(".msg.is-found")).to_have_count(1)
    assert_focus_shown(page, "opened a search hit")

    tab_to(page, ".meter-button")
    tab_to(page, ".meter-details button")
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="What the model sees")
    expect(dialog).to_be_visible()
    assert_focus_shown(page, "the model view")
    for _ in range(12):
        page.keyboard.press("Tab")
        assert_focus_shown(page, "tabbing in the model view")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert_focus_shown(page, "closed the model view")

    tab_to(page, "#logout")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/login"))
    assert_focus_shown(page, "logged out")


def test_a_new_title_leaves_the_focus_on_its_conversation(page: Page, stack: Stack, username: str) -> None:
    """The sidebar draws an item again when its title is made; a keyboard user on it stays there."""
    start(page, stack, username)
    stack.provider.script_titles(text("Otter facts", first_token_delay=2.0))
    send(page, "Tell me about otters")
    wait_finished(page)
    tab_to(page, "#conversation-list .conv-link", backwards=True)
    expect(page.locator("#conversation-list .conv-title")).to_have_text("Otter facts")
    assert_focus_shown(page, "the title arrived")
    expect(page.locator("#conversation-list .conv-link")).to_be_focused()
