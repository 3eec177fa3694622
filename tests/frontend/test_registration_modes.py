"""The register page in invite mode: it asks for the operator's code and says when it is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.support.api import PASSWORD
from tests.support.browser import Stack, serve_fresh_stack

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """This module's own server, with registration by invite code."""
    directory = tmp_path_factory.mktemp("invite")
    with serve_fresh_stack(sqlite_template, directory, registration="invite") as served:
        yield served


def _invite(database_url: str) -> str:
    """What an operator runs: `chat-shell invite create`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAT_SHELL_")}
    made = subprocess.run(
        [sys.executable, "-m", "backend.cli", "invite", "create"],
        env={**env, "PYTHONPATH": str(ROOT), "CHAT_SHELL_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return made.stdout.strip()


def test_the_register_page_takes_an_invite_code(page: Page, stack: Stack) -> None:
    code = _invite(stack.database_url)
    page.goto(f"{stack.base_url}/login")
    page.get_by_role("link", name="Create an account").click()
    page.get_by_label("Username").fill("invited")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Repeat the password").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("alert")).to_have_text("Enter your invite code.")
    page.get_by_label("Invite code").fill("inv_made-up")
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("alert")).to_have_text("The invite code is unknown, spent or expired")
    expect(page.get_by_label("Invite code")).to_be_focused()
    page.get_by_label("Invite code").fill(code)
    page.get_by_role("button", name="Create account").click()
    expect(page).to_have_url(f"{stack.base_url}/")
    expect(page.locator("#empty-state")).to_be_visible()
