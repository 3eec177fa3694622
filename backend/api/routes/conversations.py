"""Conversations and their user-visible messages."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from backend.api.deps import Ctx, CurrentUser, Db
from backend.api.params import BeforeMessageId, ConversationId
from backend.models import TitleSource
from backend.schemas.conversations import (
    ConversationCreate,
    ConversationOut,
    ConversationPage,
    ConversationUpdate,
    ForkRequest,
    MessagePage,
)
from backend.services.conversations import conversations, exports, messages

router = APIRouter(prefix="/api/conversations", tags=["conversations"])
MAX_PAGE = 200


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ConversationOut)
async def create_conversation(
    body: ConversationCreate, user: CurrentUser, db: Db, ctx: Ctx
) -> ConversationOut:
    # The title stays a stand-in only where a generated one will follow.
    generated = body.generate_title and ctx.settings.generated_titles
    created = await conversations.create(
        db,
        user,
        body.title,
        body.model_profile,
        ctx.runner.catalog,
        body.instructions,
        title_source=TitleSource.FALLBACK if generated else TitleSource.USER,
    )
    return ConversationOut.of(created)


@router.get("", response_model=ConversationPage)
async def list_conversations(
    user: CurrentUser,
    db: Db,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
    archived: Annotated[bool, Query(description="list the archived conversations instead")] = False,
) -> ConversationPage:
    return await conversations.page(db, user, limit, cursor, q, archived)


@router.get("/{conversation_id}", response_model=ConversationOut)
async def get_conversation(conversation_id: ConversationId, user: CurrentUser, db: Db) -> ConversationOut:
    return await conversations.shown(db, await conversations.get_owned(db, user, conversation_id))


@router.patch("/{conversation_id}", response_model=ConversationOut)
async def update_conversation(
    conversation_id: ConversationId, body: ConversationUpdate, user: CurrentUser, db: Db, ctx: Ctx
) -> ConversationOut:
    conversation = await conversations.get_owned(db, user, conversation_id)
    conversations.update(conversation, body.model_dump(exclude_unset=True), ctx.runner.catalog)
    return ConversationOut.of(conversation)


@router.delete("/{conversation_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_conversation(conversation_id: ConversationId, user: CurrentUser, db: Db) -> None:
    await conversations.soft_delete(db, await conversations.get_owned(db, user, conversation_id))


@router.post("/{conversation_id}/restore", response_model=ConversationOut)
async def restore_conversation(conversation_id: ConversationId, user: CurrentUser, db: Db) -> ConversationOut:
    """Undoes a delete of the last few minutes (the sidebar's "Undo")."""
    return await conversations.shown(db, await conversations.restore(db, user, conversation_id))


@router.post("/{conversation_id}/fork", status_code=status.HTTP_201_CREATED, response_model=ConversationOut)
async def fork_conversation(
    conversation_id: ConversationId, body: ForkRequest, user: CurrentUser, db: Db
) -> ConversationOut:
    conversation = await conversations.get_owned(db, user, conversation_id)
    return ConversationOut.of(await conversations.fork(db, user, conversation, body.message_id, body.title))


@router.get("/{conversation_id}/messages", response_model=MessagePage)
async def list_messages(
    conversation_id: ConversationId,
    user: CurrentUser,
    db: Db,
    before_message_id: BeforeMessageId = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> MessagePage:
    conversation = await conversations.get_owned(db, user, conversation_id)
    return await messages.page(db, conversation, before_message_id, limit)


@router.get("/{conversation_id}/export", response_class=Response)
async def export_conversation(
    conversation_id: ConversationId,
    user: CurrentUser,
    db: Db,
    fmt: Annotated[Literal["md", "json"], Query(alias="format", description="Markdown or JSON")] = "md",
) -> Response:
    conversation = await conversations.get_owned(db, user, conversation_id)
    body, media_type = exports.rendered(await exports.document(db, conversation), fmt)
    disposition = exports.download_name(conversation.title, fmt)
    return Response(body, media_type=media_type, headers={"Content-Disposition": disposition})
