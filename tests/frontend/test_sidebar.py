"""The sidebar's date groups (in the browser's time zone) with pinned conversations on top, pin,
archive and the Archived view, delete with undo, and the theme switch, at desktop and phone
sizes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect
from sqlalchemy import update

from backend.db import create_engine, session_factory
from backend.models import Conversation
from tests.frontend.actions import conversation_id, send, start, wait_finished
from tests.frontend.conftest import SIZES, open_page, screenshot
from tests.support.browser import Stack, run_off_loop
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser

# Far from UTC (UTC+14): a conversation of early this morning here is of yesterday in UTC, so
# grouping by the UTC date puts it in the wrong group.
ZONE = "Pacific/Kiritimati"
DARK = "rgb(21, 24, 29)"
LIGHT = "rgb(255, 255, 255)"
# The account page's background (the soft shade of each palette).
DARK_SOFT = "rgb(28, 32, 39)"
LIGHT_SOFT = "rgb(245, 246, 248)"


@pytest.fixture(params=sorted(SIZES))
def zoned(request: pytest.FixtureRequest, browser: Browser, stack: Stack) -> Iterator[Page]:
    yield from open_page(browser, stack, **SIZES[request.param], timezone_id=ZONE)


def sidebar(page: Page) -> Locator:
    """The sidebar, opened as a drawer first on a phone."""
    panel = page.locator("#sidebar")
    toggle = page.get_by_role("button", name="Show conversations")
    if toggle.is_visible() and toggle.get_attribute("aria-expanded") == "false":
        toggle.click()
        expect(panel).to_have_css("transform", "none")
    return panel


def close_sidebar(page: Page) -> None:
    """Closes the drawer on a phone (the sidebar stays on a desktop)."""
    toggle = page.get_by_role("button", name="Show conversations")
    if toggle.is_visible() and toggle.get_attribute("aria-expanded") == "true":
        page.keyboard.press("Escape")
        expect(page.locator("#sidebar")).not_to_be_in_viewport()


def group(page: Page, name: str) -> Locator:
    return page.get_by_role("list", name=name, exact=True).locator(".conv-title")


async def _set_updated(database_url: str, stamps: dict[int, datetime]) -> None:
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db, db.begin():
            for cid, stamp in stamps.items():
                await db.execute(update(Conversation).where(Conversation.id == cid).values(updated_at=stamp))
    finally:
        await engine.dispose()


def make(client: httpx.Client, title: str) -> int:
    return int(client.post("/api/conversations", json={"title": title}).json()["id"])


def listed(client: httpx.Client, **params: str) -> list[str]:
    return [c["title"] for c in client.get("/api/conversations", params=params).json()["items"]]


def test_date_groups_in_local_time_with_pinned_on_top(zoned: Page, stack: Stack, username: str) -> None:
    page = zoned
    client = start(page, stack, username)
    now = datetime.now(ZoneInfo(ZONE))
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    ages = {
        "Early today": min(midnight + timedelta(minutes=5), now - timedelta(minutes=1)),
        "Late yesterday": midnight - timedelta(hours=1),
        "Three days ago": midnight - timedelta(days=3) + timedelta(hours=1),
        "Last month": now - timedelta(days=30),
        "Pinned long ago": now - timedelta(days=40),
    }
    ids = {title: make(client, title) for title in ages}
    make(client, "Just now")
    run_off_loop(_set_updated(stack.database_url, {ids[t]: stamp for t, stamp in ages.items()}))
    client.patch(f"/api/conversations/{ids['Pinned long ago']}", json={"pinned": True})
    page.reload()

    panel = sidebar(page)
    expect(panel.locator(".conv-group-title")).to_have_text(
        ["Pinned", "Today", "Yesterday", "Previous 7 days", "Older"]
    )
    expect(group(page, "Pinned")).to_have_text(["Pinned long ago"])
    expect(group(page, "Today")).to_have_text(["Just now", "Early today"])
    expect(group(page, "Yesterday")).to_have_text(["Late yesterday"])
    expect(group(page, "Previous 7 days")).to_have_text(["Three days ago"])
    expect(group(page, "Older")).to_have_text(["Last month"])
    screenshot(page, f"sidebar-groups-{page.viewport_size['width']}")

    # Pinning moves a conversation on top (the pinned ones by last activity) and is kept.
    panel.get_by_role("button", name="Pin “Last month”").click()
    expect(group(page, "Pinned")).to_have_text(["Last month", "Pinned long ago"])
    expect(page.get_by_role("list", name="Older", exact=True)).to_have_count(0)
    panel.get_by_role("button", name="Unpin “Pinned long ago”").click()
    expect(group(page, "Older")).to_have_text(["Pinned long ago"])

    # Pinned while open, then sent to: it stays on top (the list's pin, not the page's older copy).
    panel.locator(".conv", has_text="Three days ago").locator("a").click()
    expect(page.locator("#conversation-title")).to_have_text("Three days ago")
    sidebar(page).get_by_role("button", name="Pin “Three days ago”").click()
    expect(group(page, "Pinned")).to_have_text(["Three days ago", "Last month"])
    close_sidebar(page)
    stack.provider.script(text("Noted."))
    send(page, "Still on?")
    wait_finished(page)
    expect(group(page, "Pinned")).to_have_text(["Three days ago", "Last month"])
    page.reload()
    sidebar(page)
    expect(group(page, "Pinned")).to_have_text(["Three days ago", "Last month"])
    assert listed(client)[:2] == ["Three days ago", "Last month"]


def test_archive_and_unarchive_from_the_archived_view(sized: Page, stack: Stack, username: str) -> None:
    page = sized
    client = start(page, stack, username)
    for title in ("Old receipts", "Tax notes", "Holiday plan"):
        make(client, title)
    page.reload()
    panel = sidebar(page)
    panel.get_by_role("button", name="Archive “Tax notes”").click()
    expect(page.get_by_role("status").filter(has_text="Archived “Tax notes”.")).to_be_visible()
    expect(group(page, "Today")).to_have_text(["Holiday plan", "Old receipts"])
    assert listed(client) == ["Holiday plan", "Old receipts"]
    assert listed(client, archived="true") == ["Tax notes"]

    panel.get_by_role("button", name="Archived").click()
    expect(panel.get_by_role("button", name="Archived")).to_have_attribute("aria-pressed", "true")
    expect(group(page, "Archived")).to_have_text(["Tax notes"])
    # Search keeps working in the Archived view, and only finds archived ones there.
    panel.get_by_label("Search conversations by title").fill("holiday")
    expect(panel.locator("#conversation-empty")).to_have_text("No conversation title matches.")
    panel.get_by_label("Search conversations by title").fill("tax")
    expect(group(page, "Archived")).to_have_text(["Tax notes"])
    panel.get_by_role("button", name="Unarchive “Tax notes”").click()
    expect(panel.locator("#conversation-empty")).to_have_text("No conversation title matches.")
    panel.get_by_label("Search conversations by title").fill("")
    expect(panel.locator("#conversation-empty")).to_have_text("No archived conversations.")

    panel.get_by_role("button", name="Archived").click()
    expect(group(page, "Today")).to_have_text(["Holiday plan", "Tax notes", "Old receipts"])
    assert listed(client, archived="true") == []


def test_delete_of_the_open_conversation_is_undone(sized: Page, stack: Stack, username: str) -> None:
    page = sized
    client = start(page, stack, username)
    for title in ("First", "Second", "Third"):
        make(client, title)
    target = make(client, "Middle one")
    client.patch(f"/api/conversations/{target}", json={"pinned": True})
    page.goto(f"{stack.base_url}/c/{target}")
    expect(page.locator("#conversation-title")).to_have_text("Middle one")
    panel = sidebar(page)
    expect(panel.locator(".conv-title")).to_have_text(["Middle one", "Third", "Second", "First"])

    with page.expect_response(lambda r: r.request.method == "DELETE"):
        panel.get_by_role("button", name="Delete “Middle one”").click()
    # No confirm() dialog (an unhandled one would be dismissed and the delete cancelled).
    expect(page).to_have_url(f"{stack.base_url}/")
    expect(page.locator("#conversation-title")).to_have_text("New conversation")
    assert client.get(f"/api/conversations/{target}").status_code == 404
    undo = (
        page.get_by_role("status").filter(has_text="Deleted “Middle one”.").get_by_role("button", name="Undo")
    )
    screenshot(page, f"delete-undo-{page.viewport_size['width']}")
    undo.click()
    expect(page).to_have_url(f"{stack.base_url}/c/{target}")
    expect(page.locator("#conversation-title")).to_have_text("Middle one")
    expect(sidebar(page).locator(".conv-title")).to_have_text(["Middle one", "Third", "Second", "First"])
    assert client.get(f"/api/conversations/{target}").json()["pinned"] is True
    page.reload()
    expect(sidebar(page).locator(".conv-title")).to_have_text(["Middle one", "Third", "Second", "First"])


def test_a_delete_not_undone_stays_deleted(sized: Page, stack: Stack, username: str) -> None:
    page = sized
    client = start(page, stack, username)
    keep = make(client, "Keep me")
    gone = make(client, "Throw away")
    page.reload()
    panel = sidebar(page)
    panel.get_by_role("button", name="Delete “Throw away”").click()
    notice = page.get_by_role("status").filter(has_text="Deleted “Throw away”.")
    expect(notice).to_be_visible()
    expect(notice).to_be_hidden(timeout=12_000)  # the Undo is offered for a few seconds
    assert client.get(f"/api/conversations/{gone}").status_code == 404
    assert listed(client) == ["Keep me"]
    page.reload()
    expect(sidebar(page).locator(".conv-title")).to_have_text(["Keep me"])
    assert client.get(f"/api/conversations/{keep}").status_code == 200


def test_theme_switch_persists_across_reloads_and_pages(sized: Page, stack: Stack, username: str) -> None:
    page = sized
    page.emulate_media(color_scheme="dark")
    start(page, stack, username)
    body = page.locator("body")
    expect(body).to_have_css("background-color", DARK)  # "System", the default, follows the system
    theme = sidebar(page).get_by_label("Theme")
    expect(theme).to_have_value("system")
    theme.select_option(label="Light")
    expect(body).to_have_css("background-color", LIGHT)
    page.reload()
    expect(body).to_have_css("background-color", LIGHT)
    expect(sidebar(page).get_by_label("Theme")).to_have_value("light")
    # The code highlighting follows it too.
    assert page.locator("link[data-code-theme=dark]").get_attribute("media") == "not all"

    page.goto(f"{stack.base_url}/account")
    expect(body).to_have_css("background-color", LIGHT_SOFT)
    account_theme = page.get_by_label("Theme")
    expect(account_theme).to_have_value("light")
    account_theme.select_option(label="System")
    expect(body).to_have_css("background-color", DARK_SOFT)
    page.emulate_media(color_scheme="light")
    expect(body).to_have_css("background-color", LIGHT_SOFT)
    account_theme.select_option(label="Dark")
    expect(body).to_have_css("background-color", DARK_SOFT)
    page.goto(f"{stack.base_url}/")
    expect(body).to_have_css("background-color", DARK)
    screenshot(page, f"theme-dark-{page.viewport_size['width']}")


def test_the_first_reply_names_the_conversation_and_a_rename_stays(
    sized: Page, stack: Stack, username: str
) -> None:
    page = sized
    client = start(page, stack, username)
    stack.provider.script(text("Late March to early April."))
    stack.provider.script_titles(text("Title: **Cherry blossoms in Kyoto**."))
    send(page, "When do the *cherry trees* bloom in Kyoto")
    # The first line names it until the reply is done; then the generated title replaces it.
    wait_finished(page)
    cid = conversation_id(page)
    expect(page.locator("#conversation-title")).to_have_text("Cherry blossoms in Kyoto")
    item = sidebar(page).locator(f'.conv[data-id="{cid}"]')
    expect(item.locator(".conv-title")).to_have_text("Cherry blossoms in Kyoto")
    assert client.get(f"/api/conversations/{cid}").json()["title_source"] == "generated"

    # A name the user gives stays through later replies and reloads.
    item.get_by_role("button", name="Rename “Cherry blossoms in Kyoto”").click()
    rename = page.get_by_label("New title")
    rename.fill("Kyoto 2027")
    rename.press("Enter")
    expect(page.locator("#conversation-title")).to_have_text("Kyoto 2027")
    close_sidebar(page)
    send(page, "And the autumn leaves?")
    wait_finished(page)
    page.reload()
    expect(page.locator("#conversation-title")).to_have_text("Kyoto 2027")
    assert len(stack.provider.title_requests) == 1
