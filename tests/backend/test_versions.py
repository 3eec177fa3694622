"""Versions in place (issue 22), on SQLite and PostgreSQL: regenerate, retry and edit add
siblings inside the conversation and keep the question's files; showing a version moves the
page, the export and the next turn's history to its path; and the faults: regenerate or switch
while a turn runs (409, the stream keeps its turn)."""

from __future__ import annotations

import json

import httpx

from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.sse import read_stream
from tests.support.uploads import upload_ok


async def _conversation(client: httpx.AsyncClient) -> int:
    response = await client.post("/api/conversations", json={"title": "versions"})
    assert response.status_code == 201
    return response.json()["id"]


async def _send(client: httpx.AsyncClient, cid: int, content: str, **body: object) -> dict:
    response = await client.post(
        f"/api/conversations/{cid}/messages", json={"content": content, **body}, params={"wait": "true"}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def _regenerate(client: httpx.AsyncClient, cid: int, **body: object) -> httpx.Response:
    return await client.post(f"/api/conversations/{cid}/regenerate", json=body or None)


async def _page(client: httpx.AsyncClient, cid: int) -> list[dict]:
    response = await client.get(f"/api/conversations/{cid}/messages")
    assert response.status_code == 200
    return response.json()["items"]


def _texts(items: list[dict]) -> list[str]:
    return [m["content"] if m["role"] == "user" else m["result"]["value"] for m in items]


def _sent(provider: ScriptedProvider) -> list[tuple[str, str]]:
    """What the model saw last, system prompt left out, as (role, text)."""
    return [
        (m["role"], m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]))
        for m in provider.last_request["messages"]
        if m["role"] != "system"
    ]


async def _conversations(client: httpx.AsyncClient) -> list[int]:
    return [c["id"] for c in (await client.get("/api/conversations")).json()["items"]]


async def test_regenerate_adds_a_version_in_place_and_keeps_the_files(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await _conversation(chatter)
    notes = await upload_ok(chatter, "notes.txt", b"The budget is 300 euros.\n", conversation_id=cid)
    scripted_provider.script(text("first answer"), text("second answer"))
    first = await _send(chatter, cid, "What is the budget?", attachment_ids=[notes["id"]])
    response = await _regenerate(chatter, cid)
    assert response.status_code == 202, response.text
    started = response.json()
    await read_stream(chatter, cid)
    # No new conversation: the sidebar still lists one.
    assert await _conversations(chatter) == [cid]
    page = await _page(chatter, cid)
    assert _texts(page) == ["What is the budget?", "second answer"]
    question, reply = page
    assert question["message_id"] == first["user_message"]["message_id"]
    assert [a["filename"] for a in question["attachments"]] == ["notes.txt"]
    assert reply["versions"] == [
        first["assistant_message"]["message_id"],
        started["assistant_message"]["message_id"],
    ]
    # The model saw the question once, with its file, and not the first answer.
    seen = _sent(scripted_provider)
    assert [role for role, _ in seen] == ["user"]
    assert "notes.txt" in seen[0][1] and "first answer" not in json.dumps(scripted_provider.last_request)

    # Showing the first version again: the page and the export follow it.
    shown = await chatter.post(
        f"/api/conversations/{cid}/versions", json={"message_id": reply["versions"][0]}
    )
    assert shown.status_code == 200, shown.text
    assert _texts(await _page(chatter, cid)) == ["What is the budget?", "first answer"]
    exported = (await chatter.get(f"/api/conversations/{cid}/export", params={"format": "json"})).json()
    assert _texts(exported["messages"]) == ["What is the budget?", "first answer"]
    markdown = (await chatter.get(f"/api/conversations/{cid}/export", params={"format": "md"})).text
    assert "first answer" in markdown and "second answer" not in markdown


async def test_edit_adds_a_question_version_that_keeps_the_files_and_the_earlier_path(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await _conversation(chatter)
    await _send(chatter, cid, "My budget is 100 euros")
    plan = await upload_ok(chatter, "plan.txt", b"Day 1: Louvre.\n", conversation_id=cid)
    asked = await _send(chatter, cid, "Suggest a hotel", attachment_ids=[plan["id"]])
    edited = await _send(chatter, cid, "Suggest a hostel", edits=asked["user_message"]["message_id"])
    assert await _conversations(chatter) == [cid]
    page = await _page(chatter, cid)
    assert _texts(page)[:3] == ["My budget is 100 euros", "Echo: My budget is 100 euros", "Suggest a hostel"]
    assert page[2]["versions"] == [asked["user_message"]["message_id"], edited["user_message"]["message_id"]]
    assert [a["filename"] for a in page[2]["attachments"]] == ["plan.txt"]
    seen = _sent(scripted_provider)
    assert [role for role, _ in seen] == ["user", "assistant", "user"]
    assert seen[0][1] == "My budget is 100 euros"
    assert "Suggest a hostel" in seen[2][1] and "plan.txt" in seen[2][1]
    assert "Suggest a hotel" not in json.dumps(scripted_provider.last_request)

    # The next message follows the edited version.
    await _send(chatter, cid, "And a museum?")
    seen = _sent(scripted_provider)
    assert "Suggest a hostel" in seen[2][1] and seen[-1] == ("user", "And a museum?")
    assert "Suggest a hotel" not in json.dumps(scripted_provider.last_request)

    # Editing the very first message: a new root, the old path is one version away.
    first = page[0]["message_id"]
    await _send(chatter, cid, "My budget is 200 euros", edits=first)
    assert _texts(await _page(chatter, cid)) == ["My budget is 200 euros", "Echo: My budget is 200 euros"]
    assert (await _page(chatter, cid))[0]["versions"][0] == first
    refused = await chatter.post(
        f"/api/conversations/{cid}/messages",
        json={"content": "x", "edits": page[1]["message_id"]},
    )
    assert refused.status_code == 422 and refused.json()["code"] == "not_a_question"


async def test_retry_after_a_failed_reply_is_a_new_version_of_it(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await _conversation(chatter)
    scripted_provider.script(text("Half an ans", stream_fault="error_event"), text("The whole answer."))
    failed = await _send(chatter, cid, "Answer me")
    assert failed["assistant_message"]["status"] == "failed"
    response = await _regenerate(chatter, cid, message_id=failed["assistant_message"]["message_id"])
    assert response.status_code == 202
    await read_stream(chatter, cid)
    page = await _page(chatter, cid)
    assert [(m["role"], m["status"]) for m in page] == [("user", "completed"), ("assistant", "completed")]
    assert page[1]["result"]["value"] == "The whole answer."
    assert page[1]["versions"] == [failed["assistant_message"]["message_id"], page[1]["message_id"]]
    # The failed attempt's partial text is not part of the retried reply's history.
    assert "Half an ans" not in json.dumps(scripted_provider.last_request)


async def test_regenerate_and_switching_are_refused_while_a_turn_runs(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await _conversation(chatter)
    first = await _send(chatter, cid, "One")
    scripted_provider.script(text(" ".join(f"w{n}" for n in range(60)), token_delay=0.02))
    started = (await chatter.post(f"/api/conversations/{cid}/messages", json={"content": "Two"})).json()
    regenerate = await _regenerate(chatter, cid)
    assert regenerate.status_code == 409 and regenerate.json()["code"] == "turn_running"
    switch = await chatter.post(
        f"/api/conversations/{cid}/versions", json={"message_id": first["assistant_message"]["message_id"]}
    )
    assert switch.status_code == 409 and switch.json()["code"] == "turn_running"
    # The stream keeps its turn: it ends with the reply being written, on the path it was on.
    read = await read_stream(chatter, cid)
    assert read.terminal is not None and read.terminal.event == "turn.completed"
    assert read.terminal.data["message"]["message_id"] == started["assistant_message"]["message_id"]
    assert _texts(await _page(chatter, cid))[2] == "Two"
    unknown = await chatter.post(f"/api/conversations/{cid}/versions", json={"message_id": 999})
    assert unknown.status_code == 404


async def test_the_history_endpoint_follows_the_version_shown(chatter: httpx.AsyncClient) -> None:
    """(Checkpoints on other versions: the case table in tests/support/history.py, both modes.)"""
    cid = await _conversation(chatter)
    one = await _send(chatter, cid, "one")
    two = await _send(chatter, cid, "two")
    await _send(chatter, cid, "two, again", edits=two["user_message"]["message_id"])
    history = (await chatter.get(f"/api/conversations/{cid}/history")).json()["messages"]
    assert [m["content"] for m in history] == ["one", "Echo: one", "two, again", "Echo: two, again"]
    await chatter.post(
        f"/api/conversations/{cid}/versions", json={"message_id": two["user_message"]["message_id"]}
    )
    history = (await chatter.get(f"/api/conversations/{cid}/history")).json()["messages"]
    assert [m["content"] for m in history] == ["one", "Echo: one", "two", "Echo: two"]
    # A number past every message: the shown path, whole.
    past = await chatter.get(f"/api/conversations/{cid}/history", params={"before_message_id": 999})
    assert past.json()["messages"] == history
    # History before a message is that message's own path, whichever version is shown.
    before = await chatter.get(
        f"/api/conversations/{cid}/history",
        params={"before_message_id": one["assistant_message"]["message_id"]},
    )
    assert [m["content"] for m in before.json()["messages"]] == ["one"]
