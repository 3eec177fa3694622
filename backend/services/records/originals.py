"""The user-visible record as the history tools read it (`list_history`, `read_message`).

This reads the raw view (SPEC 2): what the user typed and what the assistant showed, tool
outputs in full, never the model-visible chain. Each message has one readable text, paged by
character offsets (code points, so a page never splits a character). Package mode calls these
functions in-process (`DatabaseHistoryBrowser`); service mode reaches the same functions through
the conversation routes, so both modes give the model the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Conversation, Message, Role
from backend.services.conversations.lineage import find_visible_message, lineage
from backend.services.conversations.messages import visible_messages
from backend.services.errors import NotFound
from backend.services.records.history import path_checkpoint_id
from chat_shell.contracts import MAX_OUTLINE_ITEMS, OriginalsPage, OriginalSummary, OriginalText

SNIPPET_CHARS = 160


def _tool_text(block: dict[str, Any]) -> str:
    args = json.dumps(block.get("args") or {}, ensure_ascii=False)
    return f"[tool call: {block.get('name')} {args}]\n{block.get('output') or ''}\n[end of tool output]"


def readable_text(message: Message) -> str:
    """One message as the user saw it: a user's text; an assistant's text and tool blocks in
    order (outputs in full), and the error that ended the reply, if any."""
    if message.role == Role.USER:
        return message.content
    result = message.result or {}
    parts: list[str] = []
    blocks = result.get("blocks") or []
    for block in blocks:
        if block.get("type") == "text":
            # A text after a tool opens with the stream's paragraph break; parts are set apart here.
            parts.append((block.get("text") or "").strip("\n"))
        elif block.get("type") == "tool":
            parts.append(_tool_text(block))
    if not blocks and result.get("value"):
        parts.append(str(result["value"]))
    error = result.get("error")
    if isinstance(error, dict) and error.get("message"):
        parts.append(f"[the reply ended with an error: {error['message']}]")
    return "\n\n".join(part for part in parts if part)


def snippet(text: str) -> str:
    """The start of `text`, whitespace collapsed, at most `SNIPPET_CHARS` characters."""
    collapsed = " ".join(text[: SNIPPET_CHARS * 4].split())
    return collapsed if len(collapsed) <= SNIPPET_CHARS else collapsed[: SNIPPET_CHARS - 1] + "…"


async def outline(
    db: AsyncSession, conversation: Conversation, before_message_id: int | None, limit: int
) -> OriginalsPage:
    """The newest `limit` messages of the current path before `before_message_id` (fork
    ancestors included), oldest first."""
    limit = max(1, min(limit, MAX_OUTLINE_ITEMS))
    rows, has_more = await visible_messages(db, conversation, before_message_id, limit)
    checkpoint = await path_checkpoint_id(db, conversation)
    items = []
    for row in rows:
        text = readable_text(row)
        items.append(
            OriginalSummary(
                message_id=row.message_id,
                role=Role(row.role).value,
                status=row.status,
                created_at=row.created_at,
                chars=len(text),
                snippet=snippet(text),
                summarized=checkpoint is not None and row.message_id <= checkpoint,
            )
        )
    return OriginalsPage(
        items=items, next_before_message_id=rows[0].message_id if has_more and rows else None
    )


async def read_original(
    db: AsyncSession, conversation: Conversation, message_id: int, offset: int, limit_chars: int
) -> OriginalText:
    """Characters `[offset, offset + limit_chars)` of one message's readable text."""
    if offset < 0 or limit_chars < 0:
        raise ValueError("offset and limit must not be negative")
    row = await find_visible_message(db, await lineage(db, conversation), message_id)
    if row is None:
        raise NotFound(f"message {message_id} is not part of this conversation")
    text = readable_text(row)
    start = min(offset, len(text))
    page = text[start : start + limit_chars]
    return OriginalText(
        message_id=row.message_id,
        role=Role(row.role).value,
        status=row.status,
        created_at=row.created_at,
        offset=start,
        text=page,
        next_offset=start + len(page),
        total_chars=len(text),
        has_more=start + len(page) < len(text),
    )


class DatabaseHistoryBrowser:
    """The `HistoryBrowser` of package mode: the functions above, one session per call."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def outline(self, conversation_id: int, before_message_id: int | None, limit: int) -> OriginalsPage:
        async with self._sessions() as db:
            return await outline(db, await _conversation(db, conversation_id), before_message_id, limit)

    async def read(
        self, conversation_id: int, message_id: int, offset: int, limit_chars: int
    ) -> OriginalText:
        async with self._sessions() as db:
            conversation = await _conversation(db, conversation_id)
            return await read_original(db, conversation, message_id, offset, limit_chars)


async def _conversation(db: AsyncSession, conversation_id: int) -> Conversation:
    conversation = await db.get(Conversation, conversation_id)
    if conversation is None or conversation.deleted_at is not None:
        raise NotFound(f"conversation {conversation_id} does not exist")
    return conversation
