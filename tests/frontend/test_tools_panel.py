"""The tools panel on the chat page: a deployment's MCP servers (real ones, over stdio), their
tools, and the servers a conversation enables, which its next turns use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.backend.test_mcp_panel import write_servers_file
from tests.frontend.actions import send, start, wait_finished
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack, serve_fresh_stack
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser
# The checkbox that enables a server (the others mark it or its tools "ask first").
SERVER_BOX = 'input[data-kind="server"]'


@pytest.fixture(scope="module")
def stack(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A backend of its own, with two MCP servers configured ("extra" not in the default set)."""
    directory = tmp_path_factory.mktemp("tools")
    servers = write_servers_file(directory / "mcp.json")
    with serve_fresh_stack(sqlite_template, directory, mcp_servers=servers) as served:
        yield served


def _offered_servers(body: dict) -> set[str]:
    return {entry["function"]["name"].split("_")[0] for entry in body.get("tools", [])} & {"ops", "extra"}


def test_the_tools_panel_lists_the_servers_and_a_conversation_enables_the_ones_it_wants(
    page: Page, stack: Stack, username: str
) -> None:
    client = start(page, stack, username)
    cid = client.post("/api/conversations", json={"title": "Logs"}).json()["id"]
    page.goto(f"{stack.base_url}/c/{cid}")
    menu = page.locator("#tools-menu")
    expect(menu).to_be_visible(timeout=30_000)  # the servers' processes start with the app
    page.get_by_label("Tools for this conversation").click()
    ops, extra = (
        page.locator('.tool-server[data-server="ops"]'),
        page.locator('.tool-server[data-server="extra"]'),
    )
    expect(ops.locator(".tool-server-status")).to_have_text("available", timeout=30_000)
    expect(ops.locator(".tool-names")).to_contain_text("ops_logs")
    expect(extra.locator(".tool-names")).to_contain_text("extra_tool_001")
    expect(ops.locator(SERVER_BOX)).to_be_checked()
    expect(extra.locator(SERVER_BOX)).not_to_be_checked()
    screenshot(page, "tools-panel")

    with page.expect_response(lambda r: r.request.method == "PUT" and "mcp-servers" in r.url):
        extra.locator(SERVER_BOX).check()
    with page.expect_response(lambda r: r.request.method == "PUT" and "mcp-servers" in r.url):
        ops.locator(SERVER_BOX).uncheck()
    page.keyboard.press("Escape")

    stack.provider.script(text("Using the extra tools."))
    send(page, "What can you use?")
    wait_finished(page)
    assert _offered_servers(stack.provider.last_request) == {"extra"}

    page.reload()
    page.get_by_label("Tools for this conversation").click()
    expect(page.locator('.tool-server[data-server="extra"]').locator(SERVER_BOX)).to_be_checked()
    expect(page.locator('.tool-server[data-server="ops"]').locator(SERVER_BOX)).not_to_be_checked()
