"""Per-chat instructions and presets through the API: the model gets them after the operator's
system prompt, the model view shows them (and only the size of the operator's prompt), an
oversized set is refused by name, presets are each user's own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.backend.conftest import ServeChat
from tests.support.api import assistant_reply, signed_in
from tests.support.scripted_provider import ScriptedProvider, text

OPERATOR_PROMPT = "Operator-only rules: never mention the internal codename BLUEFIN."


@pytest.fixture
async def instructed(serve_chat: ServeChat) -> AsyncIterator[str]:
    async with serve_chat(system_prompt=OPERATOR_PROMPT, context_window=16_000) as base_url:
        yield base_url


async def test_instructions_reach_the_model_after_the_operators_prompt_and_can_change_any_time(
    instructed: str, scripted_provider: ScriptedProvider
) -> None:
    async with signed_in(instructed, "writer") as client:
        created = await client.post(
            "/api/conversations", json={"title": "French", "instructions": "Answer in French."}
        )
        cid = created.json()["id"]
        scripted_provider.script(text("Bonjour."), text("Hallo."), text("Hello."))
        await assistant_reply(client, cid, "hi")
        await client.patch(f"/api/conversations/{cid}", json={"instructions": "Answer in German."})
        second = await assistant_reply(client, cid, "hi again")
        context = (await client.get(f"/api/conversations/{cid}/context")).json()
        cleared = await client.patch(f"/api/conversations/{cid}", json={"instructions": "  "})
        await assistant_reply(client, cid, "and now")
    systems = [body["messages"][0] for body in scripted_provider.chat_requests]
    assert created.json()["instructions"] == "Answer in French."
    assert systems == [
        {"role": "system", "content": f"{OPERATOR_PROMPT}\n\nAnswer in French."},
        {"role": "system", "content": f"{OPERATOR_PROMPT}\n\nAnswer in German."},
        {"role": "system", "content": OPERATOR_PROMPT},
    ]
    assert second["result"]["context_metrics"]["breakdown"]["system"] > 10
    # The model view: the conversation's instructions, the operator's prompt only as a size.
    assert context["instructions"] == "Answer in German."
    assert 10 < context["system_prompt_tokens"] < 30
    assert "BLUEFIN" not in str(context) and "system_prompt" not in context
    assert cleared.json()["instructions"] is None


async def test_instructions_over_the_input_budget_are_refused_naming_them(
    instructed: str, scripted_provider: ScriptedProvider
) -> None:
    async with signed_in(instructed, "verbose") as client:
        huge = "Follow this long rule carefully. " * 3_000
        cid = (await client.post("/api/conversations", json={"instructions": huge})).json()["id"]
        failed = await assistant_reply(client, cid, "hi")
        messages = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
    assert failed["status"] == "failed"
    error = failed["result"]["error"]
    assert error["code"] == "context_refused"
    assert error["message"].startswith("This conversation's instructions are about")
    assert scripted_provider.chat_requests == []
    assert messages[0]["content"] == "hi"  # nothing lost: the message is stored


async def test_presets_are_saved_listed_used_and_deleted_by_their_owner_only(instructed: str) -> None:
    async with signed_in(instructed, "alice") as alice, signed_in(instructed, "bob") as bob:
        made = await alice.post(
            "/api/presets",
            json={"name": "Translator", "instructions": "Translate to Japanese.", "model_profile": None},
        )
        again = await alice.post("/api/presets", json={"name": "Translator"})
        unknown = await alice.post("/api/presets", json={"name": "Other", "model_profile": "no-such-model"})
        preset = made.json()
        listed = (await alice.get("/api/presets")).json()
        theirs = (await bob.get("/api/presets")).json()
        bob_edit = await bob.patch(f"/api/presets/{preset['id']}", json={"name": "Mine"})
        bob_delete = await bob.delete(f"/api/presets/{preset['id']}")
        renamed = await alice.patch(f"/api/presets/{preset['id']}", json={"name": "Japanese"})
        deleted = await alice.delete(f"/api/presets/{preset['id']}")
        after = (await alice.get("/api/presets")).json()
    assert made.status_code == 201 and preset["instructions"] == "Translate to Japanese."
    assert again.status_code == 409 and again.json()["code"] == "preset_name_taken"
    assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_model"
    assert [p["name"] for p in listed] == ["Translator"] and theirs == []
    assert bob_edit.status_code == 404 and bob_delete.status_code == 404
    assert renamed.json()["name"] == "Japanese" and deleted.status_code == 204 and after == []
