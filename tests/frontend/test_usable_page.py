"""A page everyone can use (issue 35): search snippets read as text, the meter's breakdown
never shows through a dialog, the skip link is the first Tab stop, user messages render their
Markdown (inert), the sidebar's titles keep their width, and a streaming reply is announced
once."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.frontend.actions import composer, last_assistant, metrics, send, start, wait_finished
from tests.frontend.conftest import SIZES, open_page, screenshot
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


@pytest.fixture
def phone(browser: Browser, stack: Stack) -> Iterator[Page]:
    yield from open_page(browser, stack, **SIZES["phone"])


PLANS = "Planning the spring trip to Kyoto and Nara"
# The token figures of the meter's label ("1.7k / 4.1k", "1,700 / 4,096").
TOKENS = re.compile(r"\d[\d.,]*k? / \d[\d.,]*k?")


def open_planned_conversation(page: Page, stack: Stack, username: str) -> None:
    """A conversation whose reply left a context snapshot, so the meter shows figures."""
    start(page, stack, username)
    reply = assistant("Day 1: Fushimi Inari.", context_metrics=metrics(1700, "normal"))
    cid = seed_conversation(stack.database_url, username, PLANS, [user("Plan day 1"), reply])
    page.goto(f"{stack.base_url}/c/{cid}")
    expect(page.locator(".msg")).to_have_count(2)
    expect(page.locator("#context-meter")).to_have_attribute("data-state", "normal")


def test_on_a_phone_the_header_keeps_one_row_with_its_actions_in_a_menu(
    phone: Page, stack: Stack, username: str
) -> None:
    page = phone
    open_planned_conversation(page, stack, username)
    header = page.locator("header.toolbar")
    box = header.bounding_box()
    assert box is not None and box["height"] < 70, box
    # The title has the room for more than its first word.
    title = page.locator("#conversation-title")
    two_words = title.evaluate(
        """el => { const range = document.createRange(); const text = el.firstChild;
            range.setStart(text, 0); range.setEnd(text, text.data.indexOf(" ", text.data.indexOf(" ") + 1));
            return range.getBoundingClientRect().width; }"""
    )
    assert title.evaluate("el => el.clientWidth") > two_words
    # The meter still says how many tokens, not only how much is left.
    expect(page.locator("#context-meter .meter-text")).to_have_text(TOKENS, use_inner_text=True)
    # The placeholder fits on one line.
    box_height, line = page.locator("#message-input").evaluate(
        """el => { const style = getComputedStyle(el);
            return [el.scrollHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom),
                    parseFloat(style.lineHeight)]; }"""
    )
    assert box_height < 1.5 * line, (box_height, line)

    # Share and Export are behind one menu button.
    share = page.get_by_role("button", name="Share")
    expect(share).to_be_hidden()
    expect(page.locator("#export-menu")).to_be_hidden()
    menu = page.get_by_role("button", name="Conversation actions")
    expect(menu).to_have_attribute("aria-haspopup", "true")
    expect(menu).to_have_attribute("aria-expanded", "false")
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(page.get_by_role("button", name="Instructions")).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(share).to_be_focused()
    box = header.bounding_box()
    assert box is not None and box["height"] < 70, box  # the menu drops over the transcript
    screenshot(page, "phone-header-menu")
    page.keyboard.press("Escape")
    expect(share).to_be_hidden()
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(menu).to_be_focused()

    # Share works from the menu; its dialog closed, the focus is back on the menu button.
    menu.click()
    share.click()
    dialog = page.get_by_role("dialog", name="Share this conversation")
    dialog.get_by_role("button", name="Create link").click()
    expect(dialog.get_by_role("textbox", name="Share link")).to_have_value(re.compile(r"/s/"))
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    expect(menu).to_be_focused()
    expect(share).to_be_hidden()

    # So does Export; Escape in its list closes only the list.
    menu.click()
    page.locator("#export-menu summary").click()
    page.keyboard.press("Escape")
    expect(page.get_by_role("link", name="Markdown (.md)")).to_be_hidden()
    expect(menu).to_have_attribute("aria-expanded", "true")
    page.locator("#export-menu summary").click()
    with page.expect_download() as markdown:
        page.get_by_role("link", name="Markdown (.md)").click()
    assert markdown.value.suggested_filename == f"{PLANS}.md"
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(page.locator("#export-menu")).to_be_hidden()


def test_on_a_desktop_the_header_shows_its_actions(desktop: Page, stack: Stack, username: str) -> None:
    page = desktop
    open_planned_conversation(page, stack, username)
    expect(page.get_by_role("button", name="Conversation actions")).to_be_hidden()
    for name in ("Instructions", "Share"):
        expect(page.get_by_role("button", name=name)).to_be_visible()
    expect(page.locator("#export-menu summary")).to_be_visible()
    box = page.locator("header.toolbar").bounding_box()
    assert box is not None and box["height"] < 70, box
    expect(page.locator("#conversation-title")).to_have_text(PLANS)
    expect(page.locator("#context-meter .meter-text")).to_have_text(
        re.compile(TOKENS.pattern + r" input · \d+% left"), use_inner_text=True
    )
    expect(page.locator("#message-input")).to_have_attribute(
        "placeholder", "Message… (Enter sends, Shift+Enter adds a line)"
    )
