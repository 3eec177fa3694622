"""The operators' dashboard counts MCP tool calls per server and tool: calls, errors, timeouts
and duration percentiles, from turns that really call a stdio MCP server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from alembic import command
from sqlalchemy import inspect

from backend.app import create_app
from backend.db import alembic_config, create_engine
from backend.settings import Settings
from tests.support.api import new_operator, signed_in
from tests.support.mcp_servers import stdio_server
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.servers import serve
from tests.support.sse import read_stream


async def test_the_dashboard_counts_mcp_calls_per_tool_with_errors_timeouts_and_durations(
    database_url: str,
    chat_settings: Callable[..., Settings],
    scripted_provider: ScriptedProvider,
    tmp_path: Path,
) -> None:
    servers_file = tmp_path / "mcp.json"
    config = stdio_server(call_timeout_seconds=1).model_dump()
    servers_file.write_text(json.dumps({"servers": {"ops": config}}))
    app = create_app(chat_settings(database_url, mcp_servers=servers_file))
    async with serve(app) as base_url, signed_in(base_url, "caller") as owner:
        scripted_provider.script(
            tool_call("ops_echo", {"text": "one"}),
            tool_call("ops_echo", {"text": "two"}),
            tool_call("ops_explode", {}),
            tool_call("ops_hang", {}),
            text("Done."),
        )
        cid = (await owner.post("/api/conversations", json={})).json()["id"]
        await owner.post(f"/api/conversations/{cid}/messages", json={"content": "use the tools"})
        events = (await read_stream(owner, cid)).events
        assert events[-1].event == "turn.completed"

        operator = await new_operator(base_url, database_url, "watcher")
        try:
            body = (await operator.get("/api/metrics/summary", params={"window": "1h"})).json()
        finally:
            await operator.aclose()
    tools = {row["tool"]: row for row in body["mcp_tools"]}
    assert list(tools) == ["ops_echo", "ops_explode", "ops_hang"]  # busiest first
    assert all(row["server"] == "ops" for row in tools.values())
    counts = {name: (row["calls"], row["errors"], row["timeouts"]) for name, row in tools.items()}
    assert counts == {"ops_echo": (2, 0, 0), "ops_explode": (1, 1, 0), "ops_hang": (1, 0, 1)}
    echo, hang = tools["ops_echo"], tools["ops_hang"]
    assert 0 < echo["duration_p50_ms"] <= echo["duration_p95_ms"] < 1_000
    assert 1_000 <= hang["duration_p50_ms"] < 5_000  # stopped at the 1 s call timeout


async def _has_rollup(database_url: str) -> bool:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(lambda c: inspect(c).has_table("mcp_tool_hours"))
    finally:
        await engine.dispose()


async def test_migration_0018_adds_and_drops_the_mcp_rollup(database_url: str) -> None:
    assert await _has_rollup(database_url)
    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0017")
    assert not await _has_rollup(database_url)
    await asyncio.to_thread(command.upgrade, alembic_config(database_url), "head")
    assert await _has_rollup(database_url)
