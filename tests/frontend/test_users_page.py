"""The operators' users page in Chromium (issue 21), on a server whose registration is by
invitation: reached from the sidebar's "Users" link; create an account, disable and enable it,
reset its password, make and revoke operator (the last operator refused), invite codes, and the
audit log of all of it. Other accounts get the 404 page and no link."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.frontend.actions import start
from tests.frontend.conftest import screenshot
from tests.support.api import PASSWORD, create_operator
from tests.support.browser import Stack, run_off_loop, serve_fresh_stack

pytestmark = pytest.mark.browser
NEW_PASSWORD = "reset by an operator 7"


@pytest.fixture(scope="module")
def stack(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """This module's own server, with registration by invite code."""
    directory = tmp_path_factory.mktemp("users-page")
    with serve_fresh_stack(sqlite_template, directory, registration="invite") as served:
        yield served


def _login(stack: Stack, username: str, password: str = PASSWORD) -> httpx.Response:
    with httpx.Client(base_url=stack.base_url) as anonymous:
        return anonymous.post("/api/auth/login", json={"username": username, "password": password})


def _row(page: Page, username: str) -> Locator:
    return page.locator("#users-table tbody tr").filter(
        has=page.locator("td.username", has_text=re.compile(rf"^{username}"))
    )


def _audit_actions(page: Page) -> list[str]:
    return page.locator("#audit-table tbody tr td:nth-child(3)").all_inner_texts()


def test_an_operator_manages_accounts_invites_and_sees_the_audit_log(page: Page, stack: Stack) -> None:
    run_off_loop(create_operator(stack.database_url, "olga"))
    start(page, stack, "olga", register=False)
    page.get_by_role("link", name="Users").click()
    page.wait_for_url(f"{stack.base_url}/admin/users")
    expect(_row(page, "olga")).to_contain_text("operator")
    expect(_row(page, "olga")).to_contain_text("you")

    page.get_by_label("Username").fill("newbie")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page.locator("#admin-status")).to_have_text("newbie can log in now.")
    newbie = _row(page, "newbie")
    expect(newbie).to_have_count(1)
    assert _login(stack, "newbie").status_code == 200

    newbie.get_by_role("button", name="Disable newbie").click()
    expect(newbie).to_have_attribute("data-disabled", "true")
    expect(newbie).to_contain_text("disabled")
    refused = _login(stack, "newbie")
    assert refused.status_code == 403 and refused.json()["code"] == "account_disabled"
    # The login form says why, in another browser.
    elsewhere = page.context.browser.new_context()  # type: ignore[union-attr]
    try:
        login_page = elsewhere.new_page()
        login_page.goto(f"{stack.base_url}/login")
        login_page.get_by_label("Username").fill("newbie")
        login_page.get_by_label("Password").fill(PASSWORD)
        login_page.get_by_role("button", name="Log in").click()
        expect(login_page.get_by_role("alert")).to_have_text(
            "This account is disabled; ask an operator to enable it"
        )
    finally:
        elsewhere.close()
    newbie.get_by_role("button", name="Enable newbie").click()
    expect(newbie).to_have_attribute("data-disabled", "false")
    assert _login(stack, "newbie").status_code == 200

    newbie.get_by_role("button", name="Reset password newbie").click()
    page.get_by_label("New password for newbie").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Set password", exact=True).click()
    expect(page.locator("#admin-status")).to_have_text(
        "newbie's password is reset; their sessions are logged out."
    )
    assert _login(stack, "newbie").status_code == 401
    assert _login(stack, "newbie", NEW_PASSWORD).status_code == 200

    newbie.get_by_role("button", name="Make operator newbie").click()
    expect(newbie).to_have_attribute("data-operator", "true")
    newbie.get_by_role("button", name="Revoke operator newbie").click()
    expect(newbie).to_have_attribute("data-operator", "false")
    # The last operator cannot step down: the page says why and nothing changes.
    _row(page, "olga").get_by_role("button", name="Revoke operator olga").click()
    expect(page.get_by_role("alert")).to_contain_text("Olga is the last operator")
    expect(_row(page, "olga")).to_have_attribute("data-operator", "true")

    # Invite codes: shown once, then listed as spent by the account they created.
    page.get_by_label("Valid for (days)").fill("3")
    page.get_by_role("button", name="Create invite code").click()
    code = page.locator("#new-invite-value")
    expect(code).to_have_text(re.compile(r"^inv_\S+$"))
    invites = page.locator("#invites-table tbody tr")
    expect(invites).to_have_count(1)
    expect(invites.first).to_contain_text("unused")
    with httpx.Client(base_url=stack.base_url) as anonymous:
        registered = anonymous.post(
            "/api/auth/register",
            json={"username": "invited", "password": PASSWORD, "invite_code": code.inner_text()},
        )
        assert registered.status_code == 201, registered.text
    page.reload()
    expect(invites.first).to_contain_text("invited")
    expect(_row(page, "invited")).to_have_count(1)

    assert _audit_actions(page) == [
        "created an invite code",
        "revoked operator",
        "made operator",
        "reset the password",
        "enabled the account",
        "disabled the account",
        "created the account",
    ]
    first = page.locator("#audit-table tbody tr").last
    expect(first.locator("td").nth(1)).to_have_text("olga")
    expect(first.locator("td").nth(3)).to_have_text("newbie")
    screenshot(page, "users-page")


def test_other_accounts_get_no_link_and_the_404_page(page: Page, stack: Stack) -> None:
    run_off_loop(create_operator(stack.database_url, "root"))
    with httpx.Client(base_url=stack.base_url, timeout=30) as root:
        token = root.post("/api/auth/login", json={"username": "root", "password": PASSWORD}).json()
        root.headers["X-CSRF-Token"] = token["csrf_token"]
        made = root.post("/api/admin/users", json={"username": "plain", "password": PASSWORD})
        assert made.status_code == 201, made.text
    start(page, stack, "plain", register=False)
    expect(page.get_by_role("link", name="Account")).to_be_visible()
    expect(page.get_by_role("link", name="Users")).to_have_count(0)
    response = page.goto(f"{stack.base_url}/admin/users")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
