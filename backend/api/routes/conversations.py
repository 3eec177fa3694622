"""Conversations and their user-visible messages."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel

from backend.api.deps import CurrentUser, Db
from backend.models import Attachment, Conversation, Message
from backend.models.base import utcnow
from backend.schemas.conversations import (
    AttachmentSummary,
    ConversationCreate,
    ConversationOut,
    ConversationPage,
    ConversationUpdate,
    ForkedFrom,
    ForkRequest,
    MessageOut,
    MessagePage,
)
from backend.services import conversations, exports

router = APIRouter(prefix="/api/conversations", tags=["conversations"])
MAX_PAGE = 200


def conversation_out(conversation: Conversation, running_turn_id: int | None = None) -> ConversationOut:
    forked = None
    if (
        conversation.forked_from_conversation_id is not None
        and conversation.forked_from_message_id is not None
    ):
        forked = ForkedFrom(
            conversation_id=conversation.forked_from_conversation_id,
            message_id=conversation.forked_from_message_id,
        )
    return ConversationOut(
        id=conversation.id,
        title=conversation.title,
        model_profile=conversation.model_profile,
        created_at=conversation.created_at,
        updated_at=conversation.updated_at,
        forked_from=forked,
        running_turn_id=running_turn_id,
    )


def attachment_summaries(rows: Sequence[Attachment]) -> list[AttachmentSummary]:
    """How a message lists its files: name, type, full size, status, deleted or not."""
    return [
        AttachmentSummary(
            id=a.id,
            filename=a.filename,
            mime_type=a.mime_type,
            size_bytes=a.size_bytes,
            status=a.status,
            deleted=a.deleted_at is not None,
        )
        for a in rows
    ]


def message_out(message: Message, attachments: list[AttachmentSummary] | None = None) -> MessageOut:
    return MessageOut(
        conversation_id=message.conversation_id,
        message_id=message.message_id,
        role=message.role,
        status=message.status,
        content=message.content,
        result=conversations.user_visible_result(message.result),
        attachments=attachments or [],
        created_at=message.created_at,
        updated_at=message.updated_at,
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ConversationOut)
async def create_conversation(body: ConversationCreate, user: CurrentUser, db: Db) -> ConversationOut:
    return conversation_out(await conversations.create(db, user, body.title, body.model_profile))


@router.get("", response_model=ConversationPage)
async def list_conversations(
    user: CurrentUser,
    db: Db,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
) -> ConversationPage:
    rows, next_cursor = await conversations.list_page(db, user, limit, cursor, q)
    running = await conversations.running_turns(db, [row.id for row in rows])
    return ConversationPage(
        items=[conversation_out(row, running.get(row.id)) for row in rows], next_cursor=next_cursor
    )


@router.get("/{conversation_id}", response_model=ConversationOut)
async def get_conversation(conversation_id: int, user: CurrentUser, db: Db) -> ConversationOut:
    conversation = await conversations.get_owned(db, user, conversation_id)
    running = await conversations.running_turns(db, [conversation.id])
    return conversation_out(conversation, running.get(conversation.id))


@router.patch("/{conversation_id}", response_model=ConversationOut)
async def update_conversation(
    conversation_id: int, body: ConversationUpdate, user: CurrentUser, db: Db
) -> ConversationOut:
    conversation = await conversations.get_owned(db, user, conversation_id)
    if body.title is not None:
        conversation.title = body.title
    if "model_profile" in body.model_fields_set:
        conversation.model_profile = body.model_profile
    return conversation_out(conversation)


@router.delete("/{conversation_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_conversation(conversation_id: int, user: CurrentUser, db: Db) -> None:
    await conversations.soft_delete(db, await conversations.get_owned(db, user, conversation_id))


@router.post("/{conversation_id}/fork", status_code=status.HTTP_201_CREATED, response_model=ConversationOut)
async def fork_conversation(
    conversation_id: int, body: ForkRequest, user: CurrentUser, db: Db
) -> ConversationOut:
    conversation = await conversations.get_owned(db, user, conversation_id)
    return conversation_out(await conversations.fork(db, user, conversation, body.message_id, body.title))


@router.get("/{conversation_id}/messages", response_model=MessagePage)
async def list_messages(
    conversation_id: int,
    user: CurrentUser,
    db: Db,
    before_message_id: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> MessagePage:
    conversation = await conversations.get_owned(db, user, conversation_id)
    levels = await conversations.lineage(db, conversation)
    rows, has_more = await conversations.visible_messages(db, levels, before_message_id, limit)
    files = await conversations.attachments_by_message(db, [row.id for row in rows])
    return MessagePage(items=_messages_out(rows, files), has_more=has_more)


def _messages_out(rows: list[Message], files: dict[int, list[Attachment]]) -> list[MessageOut]:
    return [message_out(row, attachment_summaries(files.get(row.id, []))) for row in rows]


class ConversationExport(BaseModel):
    """The user-visible transcript (SPEC 2): what the page shows, never `messages_chain`."""

    conversation: ConversationOut
    messages: list[MessageOut]
    exported_at: datetime


@router.get("/{conversation_id}/export", response_class=Response)
async def export_conversation(
    conversation_id: int,
    user: CurrentUser,
    db: Db,
    fmt: Annotated[Literal["md", "json"], Query(alias="format", description="Markdown or JSON")] = "md",
) -> Response:
    conversation = await conversations.get_owned(db, user, conversation_id)
    rows = await exports.all_visible_messages(db, await conversations.lineage(db, conversation))
    files = await conversations.attachments_by_message(db, [row.id for row in rows])
    document = ConversationExport(
        conversation=conversation_out(conversation),
        messages=_messages_out(rows, files),
        exported_at=utcnow(),
    )
    if fmt == "json":
        body, media_type = document.model_dump_json(indent=2), "application/json"
    else:
        body = exports.render_markdown(document.model_dump(mode="json"))
        media_type = "text/markdown; charset=utf-8"
    disposition = exports.download_name(conversation.title, fmt)
    return Response(body, media_type=media_type, headers={"Content-Disposition": disposition})
