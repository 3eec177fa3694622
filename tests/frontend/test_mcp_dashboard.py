"""The operators' dashboard in Chromium shows the MCP tool calls of a real turn (a stdio MCP
server): per server and tool, the calls, errors, timeouts and duration percentiles."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import start
from tests.frontend.conftest import screenshot
from tests.support.api import make_operator
from tests.support.browser import Stack, run_off_loop, serve_fresh_stack
from tests.support.mcp_servers import stdio_server
from tests.support.scripted_provider import text, tool_call

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def stack(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("mcp-dashboard")
    servers = directory / "mcp.json"
    # 1.2 s, not 1: uvloop's timers run off the clock read at the start of a loop iteration, so a
    # call stopped at a 1 s limit can measure 999 ms and read in milliseconds.
    config = stdio_server(call_timeout_seconds=1.2).model_dump()
    servers.write_text(json.dumps({"servers": {"ops": config}}))
    with serve_fresh_stack(sqlite_template, directory, mcp_servers=servers) as served:
        yield served


def test_the_dashboard_shows_the_mcp_calls_of_a_turn(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    run_off_loop(make_operator(stack.database_url, username))
    cid = client.post("/api/conversations", json={"title": "tools"}).json()["id"]
    stack.provider.script(
        tool_call("ops_echo", {"text": "a"}),
        tool_call("ops_echo", {"text": "b"}),
        tool_call("ops_explode", {}),
        tool_call("ops_hang", {}),
        text("Done."),
    )
    sent = client.post(
        f"/api/conversations/{cid}/messages", json={"content": "use them"}, params={"wait": "true"}
    )
    assert sent.json()["assistant_message"]["status"] == "completed", sent.text

    page.goto(f"{stack.base_url}/operators?window=1h")
    expect(page.locator("#dashboard")).to_have_attribute("data-loaded", "true")
    panel = page.locator("#mcp-tools")
    expect(panel.get_by_role("heading", name="MCP tool calls")).to_be_visible()
    rows = panel.locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0).locator("td").nth(0)).to_have_text("ops")
    seen = {
        row.locator("td").nth(1).inner_text(): tuple(row.locator("td").nth(i).inner_text() for i in range(5))
        for row in rows.all()
    }
    assert seen == {
        "ops_echo": ("ops", "ops_echo", "2", "0", "0"),
        "ops_explode": ("ops", "ops_explode", "1", "1", "0"),
        "ops_hang": ("ops", "ops_hang", "1", "0", "1"),
    }
    # The hanging call was stopped at its 1.2 s timeout: its percentiles read in seconds.
    hang = panel.locator('tr[data-tool="ops_hang"] td')
    expect(hang.nth(5)).to_have_text(re.compile(r"^1\.[2-9] s$"))
    expect(panel.locator("#mcp-tools-empty")).to_be_hidden()
    screenshot(page, "dashboard-mcp-tools")
