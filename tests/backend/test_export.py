"""Exports: the user-visible transcript as Markdown or JSON, never the model-visible chain."""

from __future__ import annotations

import httpx

from tests.support.api import new_user
from tests.support.scripted_provider import ScriptedProvider, text, tool_call


async def _turn(client: httpx.AsyncClient, cid: int, content: str) -> None:
    response = await client.post(
        f"/api/conversations/{cid}/messages", json={"content": content}, params={"wait": "true"}
    )
    assert response.status_code == 200, response.text


async def test_export_json_is_the_visible_transcript(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(tool_call("generate_report", {"rows": 2}, text="Checking. "), text("Two rows."))
    cid = (await chatter.post("/api/conversations", json={"title": "Réunion 📊"})).json()["id"]
    await _turn(chatter, cid, "Show a report")
    response = await chatter.get(f"/api/conversations/{cid}/export", params={"format": "json"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    disposition = response.headers["content-disposition"]
    assert 'filename="Reunion.json"' in disposition
    assert "filename*=UTF-8''R%C3%A9union%20%F0%9F%93%8A.json" in disposition
    document = response.json()
    assert document["conversation"]["title"] == "Réunion 📊"
    assert [m["role"] for m in document["messages"]] == ["user", "assistant"]
    reply = document["messages"][1]["result"]
    assert reply["value"] == "Checking. \n\nTwo rows."
    assert [b["type"] for b in reply["blocks"]] == ["text", "tool", "text"]
    assert "messages_chain" not in response.text


async def test_export_markdown_renders_messages_tools_and_notes(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(
        tool_call("generate_report", {"rows": 1}, text="Look: "),
        text("Here is code:\n\n```py\nx = 1\n```"),
    )
    cid = (await chatter.post("/api/conversations", json={"title": "Report"})).json()["id"]
    await _turn(chatter, cid, "Make a report")
    response = await chatter.get(f"/api/conversations/{cid}/export")  # Markdown is the default
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/markdown")
    body = response.text
    assert body.startswith("# Report\n")
    assert "## You · " in body and "Make a report" in body
    assert "<details><summary>Tool call: generate_report (completed)</summary>" in body
    # Tool output that contains fences is wrapped in a longer fence, so it cannot break out.
    assert "total rows: 1" in body and "```py\nx = 1\n```" in body
    assert body.index("Look: ") < body.index("Tool call") < body.index("Here is code")
    assert "messages_chain" not in body


async def test_export_follows_the_fork_lineage_and_ownership(
    chatter: httpx.AsyncClient, chat_server: str, scripted_provider: ScriptedProvider
) -> None:
    scripted_provider.script(text("A1"), text("A2"), text("B2"))
    cid = (await chatter.post("/api/conversations", json={"title": "Trunk"})).json()["id"]
    await _turn(chatter, cid, "Q1")
    await _turn(chatter, cid, "Q2")
    fork = (await chatter.post(f"/api/conversations/{cid}/fork", json={"message_id": 2})).json()
    await _turn(chatter, fork["id"], "Q2 edited")
    document = (await chatter.get(f"/api/conversations/{fork['id']}/export?format=json")).json()
    shown = [m["content"] or m["result"]["value"] for m in document["messages"]]
    assert shown == ["Q1", "A1", "Q2 edited", "B2"]
    body = (await chatter.get(f"/api/conversations/{fork['id']}/export?format=md")).text
    assert f"Forked from conversation {cid} at message 2." in body
    # Forking before the first message (editing it) inherits nothing.
    root = await chatter.post(f"/api/conversations/{cid}/fork", json={"message_id": 0})
    assert root.status_code == 201
    empty = (await chatter.get(f"/api/conversations/{root.json()['id']}/export?format=json")).json()
    assert empty["messages"] == []
    async with httpx.AsyncClient(base_url=chat_server) as anonymous:
        assert (await anonymous.get(f"/api/conversations/{cid}/export")).status_code == 401
    bad = await chatter.get(f"/api/conversations/{cid}/export?format=pdf")
    assert bad.status_code == 422


async def test_another_user_cannot_export(chatter: httpx.AsyncClient, chat_server: str) -> None:
    cid = (await chatter.post("/api/conversations", json={"title": "Mine"})).json()["id"]
    other = await new_user(chat_server, "other")
    assert (await other.get(f"/api/conversations/{cid}/export")).status_code == 404
    await other.aclose()
