"""Attachments in turns, end to end (issue 7): the backend over HTTP, chat_shell in package mode,
the scripted provider recording exactly what the model saw."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from itertools import pairwise
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.db import create_engine, session_factory
from backend.models import Conversation
from backend.services.records.history import resolve_history
from chat_shell.accounting.budget import budget_for
from chat_shell.providers.profiles import resolve_profile
from chat_shell.tools.pages import MESSAGE_OVERHEAD_TOKENS
from tests.support.api import new_user
from tests.support.attachments import count_tokens
from tests.support.files import MB, corrupt, log_bytes, thirty_page_pdf
from tests.support.scripted_provider import Responder, ScriptedProvider, text, tool_call
from tests.support.sse import read_stream
from tests.support.uploads import upload_ok

HEADER = re.compile(r"^\[Attachment (\d+)/(\d+) \| ID: (\d+) \|", re.M)
SEPARATOR = "\n\n"


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """The backend's database, for reading what it stored (the model-visible history)."""
    engine = create_engine(database_url)
    yield session_factory(engine)
    await engine.dispose()


async def new_conversation(client: httpx.AsyncClient) -> int:
    return int((await client.post("/api/conversations", json={"title": "files"})).json()["id"])


async def attach(client: httpx.AsyncClient, cid: int, name: str, data: bytes) -> dict[str, Any]:
    return await upload_ok(client, name, data, conversation_id=cid)


async def send(
    client: httpx.AsyncClient, cid: int, content: str, attachment_ids: list[int], *, wait: bool = False
) -> httpx.Response:
    return await client.post(
        f"/api/conversations/{cid}/messages",
        json={"content": content, "attachment_ids": attachment_ids},
        params={"wait": "true"} if wait else {},
    )


async def listed(client: httpx.AsyncClient, cid: int) -> list[dict[str, Any]]:
    return (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]


def by_role(request: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == role]


def preview_block(content: str, question: str) -> str:
    """The preview block in front of the user's own text."""
    assert content.startswith('<attachments count="') and content.endswith(SEPARATOR + question)
    return content[: -len(SEPARATOR + question)]


def read_on(attachment_id: int) -> Responder:
    """The scripted model's next step: read the log on where the last page ended; the first
    time, from the offset the preview's hint names."""

    def respond(body: dict[str, Any]) -> Any:
        results = by_role(body, "tool")
        if results:
            offset = json.loads(results[-1]["content"])["next_offset"]
        else:
            hint = re.search(
                rf"read_attachment\(attachment_id={attachment_id}, offset=(\d+)",
                by_role(body, "user")[-1]["content"],
            )
            assert hint is not None, "the preview names where to continue"
            offset = int(hint.group(1))
        return tool_call("read_attachment", {"attachment_id": attachment_id, "offset": offset})

    return respond


async def test_a_2mb_log_and_a_30_page_pdf_reach_the_model_as_previews_and_pages(
    chatter: httpx.AsyncClient,
    scripted_provider: ScriptedProvider,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    log_data, pdf_data = log_bytes(), thirty_page_pdf()
    log_text = log_data.decode()
    cid = await new_conversation(chatter)
    log = await attach(chatter, cid, "server.log", log_data)
    pdf = await attach(chatter, cid, "report.pdf", pdf_data)
    assert log["status"] == pdf["status"] == "ready" and log["extracted_chars"] == len(log_text)
    question = "Which payment incidents are in the log, and does the report mention them?"
    scripted_provider.script(
        read_on(log["id"]), read_on(log["id"]), read_on(log["id"]), text("INC-00997 failed an order.")
    )
    started = await send(chatter, cid, question, [log["id"], pdf["id"]])
    assert started.status_code == 202
    shown_files = [(a["filename"], a["size_bytes"]) for a in started.json()["user_message"]["attachments"]]
    assert shown_files == [("server.log", 2 * MB), ("report.pdf", len(pdf_data))]
    stream = await read_stream(chatter, cid)
    assert stream.terminal is not None and stream.terminal.event == "turn.completed"

    first = scripted_provider.requests[0]
    budget = budget_for(resolve_profile(first["model"]))
    # The model request holds bounded previews only.
    (current,) = by_role(first, "user")
    block = preview_block(current["content"], question)
    assert count_tokens(block) <= budget.attachment_preview_tokens
    assert [(m[0], m[1], int(m[2])) for m in HEADER.findall(block)] == [
        ("1", "2", log["id"]),
        ("2", "2", pdf["id"]),
    ]
    assert "Name: server.log" in block and "Size: 2.0 MB" in block and "Truncated: yes" in block
    assert "PAGE-MARKER-001" in block and "PAGE-MARKER-015" not in block
    middle_line = log_text[len(log_text) // 2 :].split("\n")[1]
    assert middle_line not in json.dumps(first)

    # The model paged through the log: complete, contiguous pages, each within the tool budget.
    assert len(scripted_provider.requests) == 4
    pages = [json.loads(by_role(r, "tool")[-1]["content"]) for r in scripted_provider.requests[1:]]
    hint = re.search(rf"attachment_id={log['id']}, offset=(\d+)", block)
    assert hint is not None and pages[0]["offset"] == int(hint.group(1)) > 0
    for page, following in pairwise(pages):
        assert following["offset"] == page["next_offset"] == page["offset"] + page["chars_read"]
    limit = budget.tool_output_limit("read_attachment")
    for page, request in zip(pages, scripted_provider.requests[1:], strict=True):
        assert page["content"] == log_text[page["offset"] : page["offset"] + page["chars_read"]]
        assert page["has_more"] and page["total_chars"] == len(log_text)
        assert page["chars_read"] > 10_000  # a real page, not a sliver
        raw = by_role(request, "tool")[-1]["content"]
        assert count_tokens(raw) + MESSAGE_OVERHEAD_TOKENS <= limit
    # Every page reached the model as the tool produced it: the guard never had to cut one.
    outputs = [e.data["output"] for e in stream.events if e.event == "tool.completed"]
    assert outputs == [by_role(r, "tool")[-1]["content"] for r in scripted_provider.requests[1:]]
    assert not any(e.data["truncated_for_model"] for e in stream.events if e.event == "tool.completed")
    assert all(len(json.dumps(request)) < len(log_text) // 4 for request in scripted_provider.requests)

    # The UI shows the files with their full sizes, and the reply with its tool blocks.
    user_row, assistant_row = await listed(chatter, cid)
    assert [(a["filename"], a["size_bytes"], a["status"], a["deleted"]) for a in user_row["attachments"]] == [
        ("server.log", 2 * MB, "ready", False),
        ("report.pdf", len(pdf_data), "ready", False),
    ]
    assert user_row["content"] == question
    tools = [b for b in assistant_row["result"]["blocks"] if b["type"] == "tool"]
    assert [b["name"] for b in tools] == ["read_attachment"] * 3

    # The stored model-visible history holds the question and the pages, never a whole file.
    async with sessions() as db:
        conversation = await db.get_one(Conversation, cid)
        history = (await resolve_history(db, conversation)).messages
    assert [entry.role for entry in history] == ["user", *["assistant", "tool"] * 3, "assistant"]
    assert history[0].content == question and history[0].metadata.attachment_ids == [log["id"], pdf["id"]]
    stored_pages = [json.loads(str(e.content)) for e in history if e.role == "tool"]
    assert stored_pages == pages
    assert sum(len(str(entry.content)) for entry in history) < len(log_text) // 5

    # Next turn: the earlier message is previewed again from history, its pages stay whole.
    scripted_provider.script(text("You're welcome."))
    assert (await send(chatter, cid, "Thanks!", [], wait=True)).status_code == 200
    later = scripted_provider.requests[-1]
    earlier_user = by_role(later, "user")[0]["content"]
    assert preview_block(earlier_user, question) == block
    assert [m["content"] for m in by_role(later, "tool")] == outputs


async def test_100_attachments_on_one_message_are_listed_by_header_within_budget(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await new_conversation(chatter)
    ids = []
    for n in range(100):
        lines = "".join(f"line {i} of file {n}\n" for i in range(400))
        body = f"{lines}BODY-MARKER-{n:03d}\n{lines}"
        ids.append(int((await attach(chatter, cid, f"file-{n:03d}.txt", body.encode()))["id"]))
    too_many = await send(chatter, cid, "too many", [*ids, ids[0]])
    assert too_many.status_code == 422

    response = await send(chatter, cid, "List the files.", ids, wait=True)
    assert response.status_code == 200 and response.json()["assistant_message"]["status"] == "completed"
    request = scripted_provider.requests[-1]
    block = preview_block(by_role(request, "user")[-1]["content"], "List the files.")
    assert count_tokens(block) <= budget_for(resolve_profile(request["model"])).attachment_preview_tokens
    assert "BODY-MARKER" not in block
    assert [int(m[2]) for m in HEADER.findall(block)] == ids
    assert "Only headers are shown for 100 of 100 attachments" in block
    assert len((await listed(chatter, cid))[0]["attachments"]) == 100


async def test_a_corrupt_pdf_is_stored_as_failed_and_the_turn_proceeds(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await new_conversation(chatter)
    broken = await attach(chatter, cid, "report.pdf", corrupt(thirty_page_pdf()))
    assert broken["status"] == "failed" and broken["note"]
    scripted_provider.script(text("The file could not be read."))
    response = await send(chatter, cid, "Summarize the report.", [broken["id"]], wait=True)
    assert response.status_code == 200
    assert response.json()["assistant_message"]["status"] == "completed"
    block = preview_block(
        by_role(scripted_provider.requests[-1], "user")[-1]["content"], "Summarize the report."
    )
    assert f"ID: {broken['id']}" in block and "Text extraction failed" in block
    (user_row, _) = await listed(chatter, cid)
    assert [(a["filename"], a["status"]) for a in user_row["attachments"]] == [("report.pdf", "failed")]


async def test_duplicate_uploads_are_separate_files_and_a_repeated_id_counts_once(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await new_conversation(chatter)
    data = log_bytes(50_000, seed=11)
    first = await attach(chatter, cid, "app.log", data)
    second = await attach(chatter, cid, "app-copy.log", data)
    assert first["id"] != second["id"] and second["parse_notes"]["duplicate_of"] == first["id"]
    response = await send(
        chatter, cid, "Same file twice?", [first["id"], first["id"], second["id"]], wait=True
    )
    assert response.status_code == 200
    assert [a["id"] for a in response.json()["user_message"]["attachments"]] == [first["id"], second["id"]]
    block = preview_block(by_role(scripted_provider.requests[-1], "user")[-1]["content"], "Same file twice?")
    assert [int(m[2]) for m in HEADER.findall(block)] == [first["id"], second["id"]]


async def test_an_attachment_deleted_before_sending_rejects_the_send_and_stores_nothing(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await new_conversation(chatter)
    kept = await attach(chatter, cid, "kept.txt", b"kept\n")
    dropped = await attach(chatter, cid, "dropped.txt", b"dropped\n")
    assert (await chatter.delete(f"/api/attachments/{dropped['id']}")).status_code == 204
    rejected = await send(chatter, cid, "both please", [kept["id"], dropped["id"]])
    assert rejected.status_code == 404
    assert (
        rejected.json()["code"] == "not_found" and f"attachment {dropped['id']}" in rejected.json()["message"]
    )
    assert await listed(chatter, cid) == [] and scripted_provider.requests == []
    assert (await chatter.get(f"/api/attachments/{kept['id']}")).json()["sent"] is False
    # Nothing is left half-done: the conversation takes the next message normally.
    retried = await send(chatter, cid, "just this one", [kept["id"]], wait=True)
    assert retried.status_code == 200 and [m["message_id"] for m in await listed(chatter, cid)] == [1, 2]


async def test_an_attachment_deleted_after_sending_stays_listed_and_the_model_is_told(
    chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    cid = await new_conversation(chatter)
    notes = await attach(chatter, cid, "notes.txt", b"budget 12,400 EUR\n" * 50)
    scripted_provider.script(text("Noted."))
    assert (await send(chatter, cid, "Keep these notes.", [notes["id"]], wait=True)).status_code == 200
    assert (await chatter.delete(f"/api/attachments/{notes['id']}")).status_code == 204

    (user_row, _) = await listed(chatter, cid)
    assert [(a["filename"], a["size_bytes"], a["deleted"]) for a in user_row["attachments"]] == [
        ("notes.txt", 900, True)
    ]
    scripted_provider.script(
        tool_call("read_attachment", {"attachment_id": notes["id"]}), text("It is gone.")
    )
    assert (await send(chatter, cid, "What was the budget?", [], wait=True)).status_code == 200
    first, second = scripted_provider.requests[-2:]
    earlier = preview_block(by_role(first, "user")[0]["content"], "Keep these notes.")
    assert "was deleted by its owner" in earlier and "12,400" not in earlier
    (result,) = by_role(second, "tool")
    assert "was deleted by its owner" in result["content"]


async def test_another_users_attachment_cannot_be_sent(
    chat_server: str, chatter: httpx.AsyncClient, scripted_provider: ScriptedProvider
) -> None:
    other = await new_user(chat_server, "other")
    theirs = await upload_ok(other, "secret.txt", b"secret\n")
    await other.aclose()
    cid = await new_conversation(chatter)
    response = await send(chatter, cid, "read it", [int(theirs["id"])])
    assert response.status_code == 404 and await listed(chatter, cid) == []
