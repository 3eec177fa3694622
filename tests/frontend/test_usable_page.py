"""A page everyone can use (issue 35): search snippets read as text, the meter's breakdown
never shows through a dialog, the skip link is the first Tab stop, user messages render their
Markdown (inert), the sidebar's titles keep their width, and a streaming reply is announced
once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.frontend.actions import composer, last_assistant, send, start, wait_finished
from tests.frontend.conftest import SIZES, open_page
from tests.support.browser import Stack, assistant, seed_conversation, user
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser


@pytest.fixture
def desktop(browser: Browser, stack: Stack) -> Iterator[Page]:
    yield from open_page(browser, stack, **SIZES["desktop"])


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


BOLD = "Please make this **bold**"
PAYLOAD = 'Look: <img src="/x.png" onerror="window.pwned=1"><script>window.pwned=2</script> **done**'


def assert_rendered_and_inert(page: Page) -> None:
    bodies = page.locator(".msg.user .msg-body")
    expect(bodies).to_have_count(2)
    expect(bodies.nth(0).locator("strong")).to_have_text("bold")
    expect(bodies.nth(0)).to_have_text("Please make this bold")
    expect(bodies.nth(1).locator("strong")).to_have_text("done")
    # What looks like HTML is the user's text: shown as typed, never run.
    expect(bodies.nth(1)).to_contain_text('<img src="/x.png" onerror="window.pwned=1">')
    assert bodies.locator("img, script").count() == 0
    page.wait_for_timeout(300)
    assert page.evaluate("window.pwned") is None


def test_a_user_message_renders_its_markdown_inert_on_the_chat_page(
    page: Page, stack: Stack, username: str
) -> None:
    start(page, stack, username)
    cid = seed_conversation(
        stack.database_url, username, "Styled", [user(BOLD), assistant("Fine."), user(PAYLOAD)]
    )
    page.goto(f"{stack.base_url}/c/{cid}")
    assert_rendered_and_inert(page)
    # The text as typed stays one click away: Edit shows it, Copy copies it.
    first = page.locator(".msg.user").first
    assert first.evaluate("el => el.view.copyText()") == BOLD
    first.get_by_role("button", name="Edit").click()
    expect(first.get_by_role("textbox", name="Edit your message")).to_have_value(BOLD)


def test_a_user_message_renders_its_markdown_inert_on_the_share_page(
    page: Page, stack: Stack, username: str
) -> None:
    client = start(page, stack, username)
    cid = seed_conversation(
        stack.database_url, username, "Styled", [user(BOLD), assistant("Fine."), user(PAYLOAD)]
    )
    link = client.post(f"/api/conversations/{cid}/shares", json={"include_attachments": False})
    assert link.status_code == 201, link.text
    page.goto(f"{stack.base_url}/s/{link.json()['token']}")
    assert_rendered_and_inert(page)


def test_the_open_conversations_title_keeps_the_row_and_its_buttons_show_on_hover_and_focus(
    desktop: Page, stack: Stack, username: str
) -> None:
    page = desktop
    client = start(page, stack, username)
    title = "A long conversation title about planning the spring trip to Kyoto and Nara"
    cid = client.post("/api/conversations", json={"title": title}).json()["id"]
    page.goto(f"{stack.base_url}/c/{cid}")
    row = page.locator(".conv.current")
    expect(row).to_contain_text(title)
    actions = row.locator(".conv-actions")
    page.mouse.move(900, 450)  # over the transcript, not the list
    expect(actions).to_have_css("opacity", "0")
    shown = row.locator(".conv-title").bounding_box()
    whole = row.bounding_box()
    assert shown is not None and whole is not None
    assert shown["width"] > 0.8 * whole["width"], (shown, whole)

    row.hover()
    expect(actions).to_have_css("opacity", "1")
    page.mouse.move(900, 450)
    expect(actions).to_have_css("opacity", "0")

    page.get_by_role("button", name="Archived").focus()
    page.keyboard.press("Tab")
    expect(row.locator(".conv-link")).to_be_focused()
    expect(actions).to_have_css("opacity", "1")
    page.keyboard.press("Tab")
    expect(row.get_by_role("button", name=f"Pin “{title}”")).to_be_focused()
    expect(actions).to_have_css("opacity", "1")


# Counts changes to the reply's text made once it is no longer busy (each would be announced
# again), in the order they happen.
WATCH_AFTER_BUSY = """(reply) => {
    window.changedAfterBusy = 0;
    let busy = reply.getAttribute("aria-busy") === "true";
    new MutationObserver((records) => {
        const marks = records.filter((r) => r.type === "attributes");
        for (const r of records) {
            if (r.type === "attributes") {
                const next = marks[marks.indexOf(r) + 1];
                busy = (next ? next.oldValue : reply.getAttribute("aria-busy")) === "true";
                continue;
            }
            const at = r.target.nodeType === Node.ELEMENT_NODE ? r.target : r.target.parentElement;
            if (!busy && at.closest(".msg-body")) window.changedAfterBusy += 1;
        }
    }).observe(reply, {
        subtree: true, childList: true, characterData: true,
        attributes: true, attributeFilter: ["aria-busy"], attributeOldValue: true,
    });
}"""


def test_a_streaming_reply_is_announced_politely_once(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    words = " ".join(f"word{n}" for n in range(60))
    stack.provider.script(text(words, token_delay=0.03))
    send(page, "Count for me")
    reply = last_assistant(page)
    expect(reply).to_have_attribute("data-status", "running")
    expect(reply).to_have_attribute("aria-busy", "true")
    reply.evaluate(WATCH_AFTER_BUSY)
    # The reply is its own polite live region (the rest of the transcript is not one), read as a whole
    # once it is written, not piece by piece.
    assert reply.evaluate("el => el.closest('[aria-live]') === el")
    expect(reply).to_have_attribute("aria-live", "polite")
    expect(reply).not_to_have_attribute("aria-atomic", "true")
    expect(reply.locator(".md")).to_contain_text("word5")
    expect(reply).to_have_attribute("aria-busy", "true")

    wait_finished(page)
    expect(reply).to_have_attribute("aria-busy", "false")
    expect(reply).to_have_attribute("aria-live", "polite")
    expect(reply.locator(".md")).to_have_text(words)
    assert page.evaluate("window.changedAfterBusy") == 0
