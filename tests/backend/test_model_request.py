"""The model request as sent, for its owner (issue 19): `GET .../model-request` lists the last
request of the latest turn entry by entry, the same the provider received; nobody else can read
it; the operator's system prompt text is for operators, the chat's instructions are their own
entry; a turn that never called the model says so; a 30-page PDF reaches it as its preview, not
its whole text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.backend.conftest import ServeChat
from tests.support.api import assistant_reply, new_operator, signed_in
from tests.support.files import thirty_page_pdf
from tests.support.scripted_provider import ScriptedProvider, counted_as_sent, text, tool_call
from tests.support.uploads import upload_ok

SYSTEM_PROMPT = "You are the shop's careful assistant. Never promise delivery dates."


@pytest.fixture
async def base_url(serve_chat: ServeChat) -> AsyncIterator[str]:
    # A 32k window: a message of 150,000 characters alone exceeds it.
    async with serve_chat(system_prompt=SYSTEM_PROMPT, context_window=32_768) as url:
        yield url


async def new_conversation(client: httpx.AsyncClient, **fields: str) -> int:
    return int((await client.post("/api/conversations", json={"title": "view", **fields})).json()["id"])


async def shown(client: httpx.AsyncClient, cid: int) -> dict[str, Any]:
    response = await client.get(f"/api/conversations/{cid}/model-request")
    assert response.status_code == 200, response.text
    return response.json()


async def test_the_owner_sees_the_last_request_as_the_provider_received_it(
    base_url: str, database_url: str, scripted_provider: ScriptedProvider
) -> None:
    async with signed_in(base_url, "viewer") as owner, signed_in(base_url, "stranger") as stranger:
        cid = await new_conversation(owner)
        assert (await shown(owner, cid))["state"] == "no_turns"
        scripted_provider.script(tool_call("generate_report", {"rows": 2}), text("Two rows."))
        await assistant_reply(owner, cid, "A report, please.")
        view = await shown(owner, cid)
        body = scripted_provider.chat_requests[-1]
        assert view["state"] == "sent" and view["calls"] == 2
        messages = [e for e in view["entries"] if e["role"] != "tool_schema"]
        tools = [e for e in view["entries"] if e["role"] == "tool_schema"]
        assert [e["role"] for e in messages] == [m["role"] for m in body["messages"]]
        assert [e["source"] for e in messages] == ["system", "current_input", "history", "tool_output"]
        # The user is shown the operator's prompt by its size only.
        assert messages[0]["text"] is None and messages[0]["text_hidden"] and messages[0]["tokens"] > 10
        assert [e["text"] for e in messages[1:2] + messages[3:]] == [
            body["messages"][1]["content"],
            body["messages"][3]["content"],
        ]
        assert [e["name"] for e in tools] == [t["function"]["name"] for t in body["tools"]]
        assert view["total_tokens"] == sum(e["tokens"] for e in view["entries"]) + view["framing_tokens"]
        # The shown total is the request the provider received, counted in the profile's units.
        assert view["total_tokens"] == counted_as_sent(body)

        # Nobody else can read it, as for any other object of another user.
        assert (await stranger.get(f"/api/conversations/{cid}/model-request")).status_code == 404

    operator = await new_operator(base_url, database_url, "boss")
    try:
        own = await new_conversation(operator)
        scripted_provider.script(text("Hello."))
        await assistant_reply(operator, own, "Hi")
        system = (await shown(operator, own))["entries"][0]
        assert system["source"] == "system" and system["text"] == SYSTEM_PROMPT
    finally:
        await operator.aclose()


async def test_the_chats_instructions_are_shown_as_their_own_entry_after_the_hidden_prompt(
    base_url: str, scripted_provider: ScriptedProvider
) -> None:
    async with signed_in(base_url, "instructed") as owner:
        cid = await new_conversation(owner, title="fr", instructions="Answer in French.")
        scripted_provider.script(text("Bonjour."))
        await assistant_reply(owner, cid, "Hi")
        view = await shown(owner, cid)
        body = scripted_provider.chat_requests[-1]
    assert body["messages"][0]["content"] == f"{SYSTEM_PROMPT}\n\nAnswer in French."
    system, instructions = view["entries"][:2]
    assert system["source"] == "system" and system["text_hidden"] and system["text"] is None
    assert instructions["source"] == "instructions" and instructions["text"] == "Answer in French."
    assert SYSTEM_PROMPT not in str(view)
    assert view["total_tokens"] == counted_as_sent(body)


async def test_a_turn_that_never_called_the_model_says_so(
    base_url: str, scripted_provider: ScriptedProvider
) -> None:
    async with signed_in(base_url, "refused") as owner:
        cid = await new_conversation(owner)
        calls = len(scripted_provider.chat_requests)
        # Far more than any window holds: the guard refuses before the model is called.
        await assistant_reply(owner, cid, "word " * 30_000)
        assert len(scripted_provider.chat_requests) == calls
        view = await shown(owner, cid)
        assert view["state"] == "no_model_call" and view["entries"] == []
        assert "ended before the model was called" in view["note"]


async def test_a_30_page_pdf_is_shown_as_the_preview_the_model_got(
    base_url: str, scripted_provider: ScriptedProvider
) -> None:
    async with signed_in(base_url, "reader") as owner:
        cid = await new_conversation(owner)
        pdf = await upload_ok(owner, "report.pdf", thirty_page_pdf(), conversation_id=cid)
        scripted_provider.script(text("Read it."))
        await assistant_reply(owner, cid, "Summarize the report.", [pdf["id"]])
        (current,) = [e for e in (await shown(owner, cid))["entries"] if e["source"] == "current_input"]
        sent = [m for m in scripted_provider.chat_requests[-1]["messages"] if m["role"] == "user"][-1]
        assert current["text"] == sent["content"]
        assert "PAGE-MARKER-001" in current["text"] and "PAGE-MARKER-015" not in current["text"]
        assert 0 < current["preview_tokens"] < current["tokens"]


async def test_the_next_request_is_the_following_turns_request_without_its_message(
    base_url: str, scripted_provider: ScriptedProvider
) -> None:
    async with signed_in(base_url, "planner") as owner, signed_in(base_url, "nosy") as stranger:
        cid = await new_conversation(owner)
        scripted_provider.script(tool_call("generate_report", {"rows": 2}), text("Two rows."))
        await assistant_reply(owner, cid, "A report, please.")
        calls = len(scripted_provider.chat_requests)
        response = await owner.get(f"/api/conversations/{cid}/next-model-request")
        assert response.status_code == 200, response.text
        upcoming = response.json()
        assert len(scripted_provider.chat_requests) == calls  # shown without calling the model
        assert upcoming["state"] == "next" and not upcoming["summary_due"]
        assert "current_input" not in [e["source"] for e in upcoming["entries"]]
        assert (await stranger.get(f"/api/conversations/{cid}/next-model-request")).status_code == 404

        scripted_provider.script(text("Fine."))
        await assistant_reply(owner, cid, "Thanks, and now?")
        sent = await shown(owner, cid)

    def described(entries: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(e["role"], e["source"], e["tokens"], e["text"], e["name"]) for e in entries]

    # Entry for entry what the next turn sent, but for the message it was sent with.
    (current,) = [e for e in sent["entries"] if e["source"] == "current_input"]
    others = [e for e in sent["entries"] if e["source"] != "current_input"]
    assert described(upcoming["entries"]) == described(others)
    assert upcoming["total_tokens"] + current["tokens"] == sent["total_tokens"]
