"""Tools that survive compaction (issue 19), over the whole stack: once the message that carried
an attachment is summarized, the summary still names it, so `read_attachment` stays offered; the
history tools are offered from the first model call after the summary, in the turn that made it;
and every turn row records how many attempts it ran."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.app import create_app
from backend.db import create_engine, session_factory
from backend.models import Turn
from backend.settings import Settings
from chat_shell.guard.stages.summary_compaction.prompts import SUMMARY_OPENING
from tests.support.api import signed_in
from tests.support.scripted_provider import Reply, ScriptedProvider, text, tool_call
from tests.support.servers import serve
from tests.support.texts import SMALL_COMPACTION, WORDS
from tests.support.uploads import upload_ok


@pytest.fixture
async def client(
    database_url: str, chat_settings: Callable[..., Settings]
) -> AsyncIterator[httpx.AsyncClient]:
    settings = chat_settings(database_url, **SMALL_COMPACTION)
    async with serve(create_app(settings)) as base_url, signed_in(base_url, "reader") as user:
        yield user


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(database_url)
    yield session_factory(engine)
    await engine.dispose()


BUILT_IN = {"read_attachment", "list_history", "read_message"}


def tool_names(body: dict[str, Any]) -> set[str]:
    """The built-in tools the request offered (the test settings add a report tool)."""
    return {entry["function"]["name"] for entry in body.get("tools", [])} & BUILT_IN


class Script:
    """Replies "Noted." until a summary is made; the summary names the attachment; the first
    model call after it reads the attachment, the next one answers."""

    def __init__(self, provider: ScriptedProvider, attachment_id: int) -> None:
        self.attachment_id = attachment_id
        self.summarized = False
        self.after_summary: list[dict[str, Any]] = []
        provider.default_reply = self.reply  # type: ignore[method-assign]
        provider.default_summary = self.summary  # type: ignore[method-assign]

    def summary(self, body: dict[str, Any]) -> Reply:
        self.summarized = True
        return text(f"The user shared attachment ID {self.attachment_id} (notes.txt) with the budget.")

    def reply(self, body: dict[str, Any]) -> Reply:
        if not self.summarized:
            return text("Noted.")
        self.after_summary.append(body)
        if len(self.after_summary) == 1:
            return tool_call("read_attachment", {"attachment_id": self.attachment_id})
        return text("The notes were deleted.")


async def test_a_summary_naming_a_deleted_attachment_keeps_the_tools_and_the_tool_says_deleted(
    client: httpx.AsyncClient,
    scripted_provider: ScriptedProvider,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    cid = int((await client.post("/api/conversations", json={"title": "notes"})).json()["id"])
    notes = await upload_ok(client, "notes.txt", b"budget 12,400 EUR\n" * 50, conversation_id=cid)
    script = Script(scripted_provider, notes["id"])
    sent = await client.post(
        f"/api/conversations/{cid}/messages",
        json={"content": "Keep these notes.", "attachment_ids": [notes["id"]]},
        params={"wait": "true"},
    )
    assert sent.status_code == 200, sent.text
    # Before any summary the history tools are not offered; the attachment's tool is.
    assert tool_names(scripted_provider.chat_requests[-1]) == {"read_attachment"}
    assert (await client.delete(f"/api/attachments/{notes['id']}")).status_code == 204

    for turn in range(12):
        response = await client.post(
            f"/api/conversations/{cid}/messages",
            json={"content": f"Turn {turn}: " + WORDS * 80},
            params={"wait": "true"},
        )
        assert response.status_code == 200, response.text
        if script.summarized:
            break
    assert script.summarized, "no compaction happened"

    first, second = script.after_summary
    shown = first["messages"]
    summary = next(m for m in shown if str(m.get("content", "")).startswith(SUMMARY_OPENING))
    assert f"attachment ID {notes['id']}" in summary["content"]
    # The message that carried the attachment is summarized away: only the summary names it.
    assert not any("Keep these notes." in str(m.get("content", "")) for m in shown)
    # In the turn that compacted, from its first model call after the summary.
    assert tool_names(first) == BUILT_IN
    (result,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert "was deleted by its owner" in result["content"]

    async with sessions() as db:
        attempts = list(await db.scalars(select(Turn.attempts).where(Turn.conversation_id == cid)))
    assert attempts and all(count == 1 for count in attempts)
