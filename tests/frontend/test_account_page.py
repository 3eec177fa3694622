"""The account page in Chromium (issue 21): reached from the chat page's sidebar; the password
change (a wrong current password refused, then the other sessions logged out), the sessions
list with "log out" per session and for all others, and API tokens made, shown once, used as
bearers and revoked."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import start
from tests.frontend.conftest import screenshot
from tests.support.api import PASSWORD
from tests.support.browser import Stack

pytestmark = pytest.mark.browser
NEW_PASSWORD = "a brand new passphrase 42"


def _login(stack: Stack, username: str, password: str = PASSWORD) -> httpx.Client:
    client = httpx.Client(
        base_url=stack.base_url, timeout=30, headers={"User-Agent": "Firefox/128.0 (X11; Linux)"}
    )
    response = client.post("/api/auth/login", json={"username": username, "password": password})
    assert response.status_code == 200, response.text
    client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
    return client


def test_the_password_and_sessions_of_the_account(page: Page, stack: Stack, username: str) -> None:
    api = start(page, stack, username)
    other = _login(stack, username)
    page.get_by_role("link", name="Account").click()
    page.wait_for_url(f"{stack.base_url}/account")
    rows = page.locator("#sessions-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.filter(has_text="this session")).to_have_count(1)
    expect(rows.filter(has_text="Firefox on Linux")).to_have_count(1)

    page.get_by_label("Current password").fill("not my password")
    page.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    page.get_by_label("Repeat the new password").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Change password").click()
    expect(page.locator("#password-error")).to_have_text("The current password is wrong")
    expect(page.get_by_label("Current password")).to_be_focused()
    assert other.get("/api/auth/me").status_code == 200

    page.get_by_label("Current password").fill(PASSWORD)
    page.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    page.get_by_label("Repeat the new password").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Change password").click()
    expect(page.locator("#password-status")).to_have_text(
        "Your password is changed; your other sessions are logged out."
    )
    expect(rows).to_have_count(1)
    assert other.get("/api/auth/me").status_code == 401
    assert api.get("/api/auth/me").status_code == 200  # the browser's own session stays

    # Two more browsers: one logged out by its row's button, the other by "all others".
    first, second = _login(stack, username, NEW_PASSWORD), _login(stack, username, NEW_PASSWORD)
    page.reload()
    expect(rows).to_have_count(3)
    rows.filter(has_not_text="this session").first.get_by_role("button", name="Log out").click()
    expect(page.locator("#sessions-status")).to_have_text("That session is logged out.")
    expect(rows).to_have_count(2)
    assert [first.get("/api/auth/me").status_code, second.get("/api/auth/me").status_code].count(401) == 1
    page.get_by_role("button", name="Log out all other sessions").click()
    expect(page.locator("#sessions-status")).to_have_text("1 other session is logged out.")
    expect(rows).to_have_count(1)
    assert first.get("/api/auth/me").status_code == second.get("/api/auth/me").status_code == 401
    screenshot(page, "account-sessions")
    # This session's own "Log out" ends it and goes to the login page.
    rows.first.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{stack.base_url}/login")
    for client in (api, other, first, second):
        client.close()


def test_api_tokens_are_shown_once_authenticate_and_are_revoked(
    page: Page, stack: Stack, username: str
) -> None:
    api = start(page, stack, username, "/account")
    expect(page.locator("#tokens-empty")).to_be_visible()
    page.get_by_label("Token name").fill("nightly backup")
    page.get_by_label("Expires after").select_option("30")
    page.get_by_role("button", name="Create token").click()
    shown = page.locator("#new-token-value")
    expect(shown).to_have_text(re.compile(r"^cs_\S{20,}$"))
    secret = shown.inner_text()
    row = page.locator("#tokens-table tbody tr").filter(has_text="nightly backup")
    expect(row.locator(".token-state")).to_have_text("active")
    expect(row).to_contain_text(secret[:10])
    screenshot(page, "account-tokens")

    with httpx.Client(base_url=stack.base_url, headers={"Authorization": f"Bearer {secret}"}) as bot:
        assert bot.get("/api/auth/me").json()["username"] == username
        # Shown once: a reload lists the token by its first characters only.
        page.reload()
        expect(page.locator("#new-token")).to_be_hidden()
        assert secret not in page.content()
        row.get_by_role("button", name="Revoke nightly backup").click()
        expect(row.locator(".token-state")).to_have_text("revoked")
        refused = bot.get("/api/auth/me")
        assert refused.status_code == 401 and refused.json()["code"] == "invalid_token"
    assert api.get("/api/auth/tokens").json()[0]["revoked_at"] is not None
    api.close()
