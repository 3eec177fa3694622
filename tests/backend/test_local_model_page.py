"""The chat page while the local model starts and after it failed: a notice says so and the
message is held back, then sending works once the model is ready (stand-in servers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from chat_shell.providers.profiles import LOCAL_MODEL_NAME
from tests.frontend.conftest import screenshot
from tests.support import databases
from tests.support.browser import api_client, launch_chromium, log_in, serve_stack
from tests.support.local_model import standin_command, write_gguf

pytestmark = pytest.mark.browser


def _serve(tmp_path: Path, sqlite_template: Path, fault: str, ready_when: Path | None = None):  # type: ignore[no-untyped-def]
    return serve_stack(
        databases.sqlite_copy(sqlite_template, tmp_path),
        tmp_path / "data",
        local_model="auto",
        openai_base_url=None,
        local_model_file=write_gguf(tmp_path / "stand-in.gguf"),
        local_model_server=standin_command(fault, ready_when=ready_when),
    )


def test_the_page_says_the_model_is_starting_and_sends_once_it_is_ready(
    tmp_path: Path, sqlite_template: Path
) -> None:
    loaded = tmp_path / "loaded"
    with _serve(tmp_path, sqlite_template, "none", loaded) as stack, sync_playwright() as playwright:
        api_client(stack.base_url, "waiter").close()
        browser = launch_chromium(playwright)
        page = browser.new_page()
        log_in(page, stack.base_url, "waiter")
        notice = page.locator("#local-model-status")
        send = page.get_by_role("button", name="Send")

        expect(notice).to_have_text(f"The local model ({LOCAL_MODEL_NAME}) is starting…")
        expect(send).to_be_disabled()
        box = page.get_by_role("textbox", name="Message")
        box.fill("Hello there")
        box.press("Enter")
        screenshot(page, "local-model-starting")
        expect(page.locator(".msg.user")).to_have_count(0)

        loaded.touch()
        expect(notice).to_be_hidden(timeout=30_000)
        expect(send).to_be_enabled()
        send.click()
        expect(page.locator(".msg.assistant[data-status='completed']")).to_have_count(1, timeout=30_000)
        browser.close()


def test_the_page_shows_a_failed_model_with_its_reason_and_log(tmp_path: Path, sqlite_template: Path) -> None:
    with _serve(tmp_path, sqlite_template, "segfault-first") as stack, sync_playwright() as playwright:
        api_client(stack.base_url, "unlucky").close()
        browser = launch_chromium(playwright)
        page = browser.new_page()
        log_in(page, stack.base_url, "unlucky")
        notice = page.locator("#local-model-status")

        expect(notice).to_contain_text(
            f"The local model ({LOCAL_MODEL_NAME}) failed: the server crashed on its first decode"
        )
        expect(notice).to_contain_text(str(tmp_path / "data" / "local-model.log"))
        expect(page.get_by_role("button", name="Send")).to_be_disabled()
        screenshot(page, "local-model-failed")
        browser.close()
