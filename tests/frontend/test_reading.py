"""Reading a conversation: a long user message collapses behind "Show more", and code in a
user message renders monospace (never as HTML), at desktop and phone sizes."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import send, start, wait_finished
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser

PASTED_LOG = "\n".join(f"12:00:{n:02d} worker-{n % 4} handled request {n} in {n * 3} ms" for n in range(60))
QUESTION = (
    "Why is `worker-3` slow? Here is the log:\n```text\n"
    + PASTED_LOG
    + '\n```\nAnd <img src="/x.png" onerror="window.pwned=1"> is just text.'
)


def test_long_user_messages_collapse_and_code_is_monospace(sized: Page, stack: Stack, username: str) -> None:
    page = sized
    start(page, stack, username)
    send(page, QUESTION)
    wait_finished(page)
    message = page.locator(".msg.user")
    body = message.locator(".msg-body")
    collapsed = body.bounding_box()
    assert collapsed is not None
    more = message.get_by_role("button", name="Show more")
    expect(more).to_have_attribute("aria-expanded", "false")
    # Collapsed, the 60-line paste takes a few lines of the screen, not all of it.
    assert collapsed["height"] < 0.45 * page.viewport_size["height"]  # type: ignore[index]

    code = body.locator(".codeblock pre code")
    expect(code).to_have_text(PASTED_LOG)
    font = code.evaluate("el => getComputedStyle(el).fontFamily")
    assert "mono" in font.lower()
    inline = body.locator("p > code")
    expect(inline).to_have_text("worker-3")
    assert "mono" in inline.evaluate("el => getComputedStyle(el).fontFamily").lower()
    # What looks like HTML stays text.
    expect(body).to_contain_text('<img src="/x.png" onerror="window.pwned=1"> is just text.')
    assert body.locator("img").count() == 0 and page.evaluate("window.pwned") is None
    screenshot(page, f"long-message-collapsed-{page.viewport_size['width']}")  # type: ignore[index]

    more.click()
    expect(message.get_by_role("button", name="Show less")).to_have_attribute("aria-expanded", "true")
    expanded = body.bounding_box()
    assert expanded is not None and expanded["height"] > 2 * collapsed["height"]
    # Copy gives the message exactly as typed.
    assert page.evaluate("document.querySelector('.msg.user').view.copyText()") == QUESTION


TITLES = [
    ("**Plan** a *three-day* trip to Kyoto", "Plan a three-day trip to Kyoto"),
    ("# Kyoto in spring\nmore text", "Kyoto in spring"),
    ("```python\nprint('hanami')\n```", "print('hanami')"),
    ("- [the docs](https://example.com) say `read_message`", "the docs say read_message"),
    ("> quoted ~~old~~ idea", "quoted old idea"),
    ("\n\n  snake_case_name is 2*3  ", "snake_case_name is 2*3"),
    ("", "New conversation"),
]


def test_titles_from_the_first_message_drop_markdown(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    made = page.evaluate(
        "async (texts) => { const { titleFrom } = await import('/static/js/format.js');"
        " return texts.map(titleFrom); }",
        [source for source, _ in TITLES],
    )
    assert made == [title for _, title in TITLES]
    send(page, "**Plan** a *three-day* trip to Kyoto")
    wait_finished(page)
    expect(page.locator("#conversation-title")).to_have_text("Plan a three-day trip to Kyoto")
    expect(page.locator(".conv").first).to_contain_text("Plan a three-day trip to Kyoto")


MATH_REPLY = (
    "The area is $\\pi r^2$, and in general\n\n$$\n\\int_0^1 x^2\\,dx = \\frac{1}{3}\n$$\n\n"
    "It costs $5 and $10 at most; `$x$` in code stays code."
)


def test_math_in_a_reply_renders_as_math_and_dollar_amounts_stay_text(
    sized: Page, stack: Stack, username: str
) -> None:
    page = sized
    start(page, stack, username)
    stack.provider.script(text(MATH_REPLY))
    send(page, "What is the area of a circle?")
    reply = wait_finished(page).locator(".msg-body")
    inline = reply.locator("math:not([display=block])")
    block = reply.locator("math[display=block]")
    expect(inline).to_have_count(1)
    expect(block).to_have_count(1)
    # MathML the browser lays out (DOMPurify drops the TeX annotation KaTeX adds).
    expect(inline.locator("msup")).to_have_count(1)
    expect(inline.locator("mi").first).to_have_text("π")
    expect(block.locator("mfrac")).to_have_count(1)
    box = block.bounding_box()
    assert box is not None and box["height"] > 20  # laid out as a display formula, not a raw line
    expect(reply).to_contain_text("It costs $5 and $10 at most;")
    expect(reply.locator("code")).to_have_text("$x$")
    assert "$\\pi" not in reply.inner_text()
    screenshot(page, "math-reply")
