"""The accessibility audit (issue 35): axe-core finds no serious or critical violation on each page
a user or an operator meets, in the light and the dark theme (the system's, which the default
theme follows)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import (
    compacted_reply,
    compaction_record,
    conversation_id,
    send,
    start,
    wait_finished,
)
from tests.frontend.test_model_view import open_model_view
from tests.support.api import make_operator
from tests.support.axe import audit, describe
from tests.support.browser import Stack, assistant, run_off_loop, seed_conversation, user
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser


def assert_accessible(page: Page) -> None:
    """No serious or critical violation in either theme; the failure lists each rule, its impact
    and the elements that break it."""
    found: dict[str, str] = {}
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        violations = audit(page)
        if violations:
            found[theme] = describe(violations)
    page.emulate_media(color_scheme="light")
    assert not found, "\n".join(f"[{theme}]\n{lines}" for theme, lines in found.items())


def test_the_empty_chat_page(sized: Page, stack: Stack, username: str) -> None:
    """On a desktop and a phone: the narrow header has controls of its own."""
    start(sized, stack, username)
    expect(sized.get_by_label("Message", exact=True)).to_be_enabled()
    assert_accessible(sized)


def test_the_chat_page_while_a_reply_streams(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    stack.provider.script(text("A reply that is still being written", hang=True))
    send(page, "Tell me something")
    expect(page.locator(".msg.assistant").last).to_contain_text("still being written")
    expect(page.locator("#stop")).to_be_visible()
    assert_accessible(page)


def test_the_chat_page_with_a_compaction_boundary(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    done = compaction_record(
        "completed", after_tokens=1500, summary_text="The trip so far.", duration_ms=900.0
    )
    cid = seed_conversation(
        stack.database_url,
        username,
        "Trip planning",
        [user("Where to?"), assistant("Kyoto."), user("When?"), compacted_reply("In April.", done)],
    )
    page.goto(f"{stack.base_url}/c/{cid}")
    expect(page.locator(".boundary")).to_have_count(1)
    assert_accessible(page)


def test_the_chat_page_with_the_model_view_open(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    stack.provider.script(text("Hello there."))
    send(page, "Hello")
    wait_finished(page)
    expect(open_model_view(page).locator(".model-entry").first).to_be_visible()
    assert_accessible(page)


def test_the_dashboard(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    client.post("/api/conversations", json={"title": "Counted"})
    run_off_loop(make_operator(stack.database_url, username))
    page.goto(f"{stack.base_url}/operators")
    expect(page.locator("main")).to_be_visible()
    page.wait_for_load_state("networkidle")
    assert_accessible(page)


def test_the_account_page(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username, "/account")
    page.wait_for_load_state("networkidle")
    assert_accessible(page)


def test_the_users_page(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    run_off_loop(make_operator(stack.database_url, username))
    page.goto(f"{stack.base_url}/admin/users")
    page.wait_for_load_state("networkidle")
    assert_accessible(page)


def test_the_share_page(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    stack.provider.script(text("The **area** is $\\pi r^2$."))
    send(page, "Area of a circle?")
    wait_finished(page)
    made = client.post(f"/api/conversations/{conversation_id(page)}/shares", json={})
    assert made.status_code == 201, made.text
    # Off the chat page first: its script, signed out, would navigate to the login page
    # while the share page loads.
    page.goto("about:blank")
    page.context.clear_cookies()
    page.goto(f"{stack.base_url}/s/{made.json()['token']}")
    expect(page.locator(".msg")).to_have_count(2)
    assert_accessible(page)


def test_the_login_page(page: Page, stack: Stack) -> None:
    page.goto(f"{stack.base_url}/login")
    expect(page.get_by_label("Username")).to_be_visible()
    assert_accessible(page)
