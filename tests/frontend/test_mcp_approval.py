""" "Ask first" on the chat page: a tool marked in the tools panel pauses the reply with its
request (tool name and arguments) in the transcript, the request is still there after a reload,
and Allow runs the tool (a real MCP server over stdio) and the reply completes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import last_assistant, send, start, wait_finished
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack, serve_fresh_stack
from tests.support.mcp_servers import stdio_server
from tests.support.scripted_provider import text, tool_call

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def stack(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("approval")
    servers = directory / "mcp.json"
    servers.write_text(json.dumps({"servers": {"ops": stdio_server().model_dump()}}))
    with serve_fresh_stack(sqlite_template, directory, mcp_servers=servers) as served:
        yield served


def test_an_ask_first_tool_waits_for_allow_and_then_runs(
    page: Page, stack: Stack, username: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    client = start(page, stack, username)
    cid = client.post("/api/conversations", json={"title": "Careful"}).json()["id"]
    page.goto(f"{stack.base_url}/c/{cid}")
    expect(page.locator("#tools-menu")).to_be_visible(timeout=30_000)
    page.get_by_label("Tools for this conversation").click()
    touch = page.locator('.tool-server[data-server="ops"] input[data-kind="ask-first"][value="ops_touch"]')
    with page.expect_response(lambda r: r.request.method == "PUT" and "mcp-servers" in r.url):
        touch.check(timeout=30_000)
    page.keyboard.press("Escape")

    stack.provider.script(tool_call("ops_touch", {"path": str(marks)}), text("Marked once."))
    send(page, "Mark the file")
    request = last_assistant(page).locator('.tool-approval[data-approval="pending"]')
    expect(request).to_contain_text("ops_touch", timeout=30_000)
    expect(last_assistant(page).locator(".tool-args")).to_contain_text(str(marks))
    assert not marks.exists()

    page.reload()  # the paused turn's stream replays the request
    request = last_assistant(page).locator('.tool-approval[data-approval="pending"]')
    expect(request).to_contain_text("ops_touch", timeout=30_000)
    screenshot(page, "approval-request")
    request.get_by_role("button", name="Allow").click()

    reply = wait_finished(page)
    expect(reply.locator(".tool-output")).to_have_text("1 run(s)")
    expect(reply.locator('.tool[data-approval="allowed"] .tool-approval-flag')).to_have_text("allowed by you")
    expect(reply).to_contain_text("Marked once.")
    assert marks.read_text() == "ran\n"
