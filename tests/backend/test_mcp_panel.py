"""The tools panel's API: the configured MCP servers with their tools, and the servers a
conversation enabled (stored with it, used by its turns). Real MCP servers over stdio."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from backend.app import create_app
from backend.settings import Settings
from tests.support.api import signed_in
from tests.support.mcp_servers import stdio_server
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import serve


def write_servers_file(path: Path) -> Path:
    servers = {
        "ops": stdio_server().model_dump(),
        "extra": stdio_server("--tools", "2", enabled_by_default=False).model_dump(),
    }
    path.write_text(json.dumps({"servers": servers}))
    return path


@pytest.fixture
async def mcp_chatter(
    sqlite_url: str, chat_settings: Callable[..., Settings], tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    settings = chat_settings(sqlite_url, mcp_servers=write_servers_file(tmp_path / "mcp.json"))
    async with serve(create_app(settings)) as base_url, signed_in(base_url, "toolsy") as client:
        yield client


def _offered_servers(body: dict) -> set[str]:
    return {entry["function"]["name"].split("_")[0] for entry in body.get("tools", [])} & {"ops", "extra"}


async def test_a_conversation_lists_the_servers_and_enables_the_ones_it_wants(
    mcp_chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = (await mcp_chatter.post("/api/conversations", json={})).json()["id"]
    panel = (await mcp_chatter.get(f"/api/conversations/{cid}/mcp-servers")).json()
    servers = {server["name"]: server for server in panel["servers"]}
    assert panel["chosen"] is False
    assert {name: (s["status"], s["enabled"]) for name, s in servers.items()} == {
        "ops": ("available", True),
        "extra": ("available", False),
    }
    assert "ops_logs" in [tool["name"] for tool in servers["ops"]["tools"]]
    assert {"extra_tool_000", "extra_tool_001"} <= {tool["name"] for tool in servers["extra"]["tools"]}

    scripted_provider.script(text("default"), text("chosen"))
    sent = {"content": "hi"}
    await mcp_chatter.post(f"/api/conversations/{cid}/messages", json=sent, params={"wait": "true"})
    assert _offered_servers(scripted_provider.last_request) == {"ops"}

    chosen = await mcp_chatter.put(f"/api/conversations/{cid}/mcp-servers", json={"servers": ["extra"]})
    assert chosen.status_code == 200
    assert {s["name"]: s["enabled"] for s in chosen.json()["servers"]} == {"ops": False, "extra": True}
    await mcp_chatter.post(f"/api/conversations/{cid}/messages", json=sent, params={"wait": "true"})
    assert _offered_servers(scripted_provider.last_request) == {"extra"}
    reread = (await mcp_chatter.get(f"/api/conversations/{cid}/mcp-servers")).json()
    assert reread["chosen"] is True and [s["enabled"] for s in reread["servers"]] == [False, True]

    unknown = await mcp_chatter.put(f"/api/conversations/{cid}/mcp-servers", json={"servers": ["nope"]})
    assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_mcp_server"
    reset = await mcp_chatter.put(f"/api/conversations/{cid}/mcp-servers", json={"servers": None})
    assert reset.json()["chosen"] is False
