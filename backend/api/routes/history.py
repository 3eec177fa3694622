"""The model-visible side of a conversation, and what a remote chat_shell reads for one turn.

- `GET .../history`: the model-visible history (SPEC 6.2), markers included.
- `GET .../context`: what the model will see next turn, for the owner (never the transcript).
- `GET .../messages/outline`, `GET .../messages/{message_id}/text`: the user-visible record as
  the `list_history` / `read_message` tools read it.
- `GET .../attachments/{attachment_id}` and `.../text`: an attachment of this conversation, as
  the `AttachmentReader` contract describes and reads it.

Everything here except `context` also answers a turn capability (service mode) scoped to the
conversation; any other conversation answers 404, as for other users' objects.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.api.deps import Ctx, CurrentUser, Db, current_principal
from backend.api.errors import ApiError, not_found
from backend.context import AppContext
from backend.models import Conversation, Message, Role
from backend.schemas.history import ModelContext
from backend.services import capabilities, conversations, originals
from backend.services.attachment_reader import DatabaseAttachmentReader
from backend.services.history import level_clause, resolve_history
from chat_shell.contracts import (
    MAX_OUTLINE_ITEMS,
    MAX_TEXT_PAGE_CHARS,
    AttachmentPage,
    AttachmentRef,
    ContextMetrics,
    ModelHistory,
    OriginalsPage,
    OriginalText,
)

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/conversations", tags=["history"])

MAX_ID = 2**63 - 1
# `messages.message_id` is a 32-bit column.
MAX_MESSAGE_ID = 2**31 - 1
MAX_OFFSET = 2**62
# Assistant messages looked at (newest first) for the latest stored metrics snapshot.
METRICS_LOOKBACK = 10

ConversationId = Annotated[int, Path(ge=1, le=MAX_ID)]
MessageId = Annotated[int, Path(ge=1, le=MAX_MESSAGE_ID)]
AttachmentId = Annotated[int, Path(ge=1, le=MAX_ID)]
BeforeMessageId = Annotated[int | None, Query(ge=1, le=MAX_MESSAGE_ID)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


async def _by_capability(db: AsyncSession, ctx: AppContext, conversation_id: int, token: str) -> Conversation:
    if not ctx.settings.service_token:
        raise ApiError(401, "invalid_capability", "turn capabilities are not enabled on this server")
    try:
        grant = capabilities.verify(capabilities.derive_key(ctx.settings.service_token), token)
    except capabilities.InvalidCapability as exc:
        raise ApiError(401, "invalid_capability", str(exc)) from None
    if grant.conversation_id != conversation_id:
        raise not_found("conversation")
    return await conversations.get_for_owner(db, grant.owner_id, conversation_id)


async def readable_conversation(
    conversation_id: ConversationId, request: Request, db: Db, ctx: Ctx
) -> Conversation:
    """The conversation, for its owner (session or API token) or a turn capability scoped to it."""
    scheme, _, secret = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and capabilities.is_capability(secret.strip()):
        return await _by_capability(db, ctx, conversation_id, secret.strip())
    principal = await current_principal(request)
    return await conversations.get_owned(db, principal.user, conversation_id)


Readable = Annotated[Conversation, Depends(readable_conversation)]


@router.get("/{conversation_id}/history", response_model=ModelHistory, response_model_exclude_none=True)
async def model_history(
    conversation: Readable,
    db: Db,
    from_latest_compaction: bool = True,
    before_message_id: BeforeMessageId = None,
    limit: Annotated[int | None, Query(ge=0, le=MAX_MESSAGE_ID)] = None,
) -> ModelHistory:
    """The model-visible history (SPEC 6.2): chain entries with their whitelisted `metadata`.

    Not the transcript: summaries, retained clones and compact tool outputs appear as the model
    sees them. `limit` counts user-visible rows after the checkpoint; 0 means none."""
    resolved = await resolve_history(
        db,
        conversation,
        before_message_id=before_message_id,
        limit=limit,
        from_latest_compaction=from_latest_compaction,
    )
    return ModelHistory(
        conversation_id=conversation.id,
        checkpoint_message_id=resolved.checkpoint_message_id,
        messages=resolved.messages,
    )


async def _latest_metrics(
    db: AsyncSession, conversation: Conversation
) -> tuple[ContextMetrics | None, int | None]:
    looked = 0
    for level in await conversations.lineage(db, conversation):
        rows = await db.scalars(
            select(Message)
            .where(level_clause(level, 0, None), Message.role == Role.ASSISTANT)
            .order_by(Message.message_id.desc())
            .limit(METRICS_LOOKBACK - looked)
        )
        for row in rows:
            looked += 1
            snapshot = (row.result or {}).get("context_metrics")
            if snapshot:
                try:
                    return ContextMetrics.model_validate(snapshot), row.message_id
                except ValidationError:
                    log.warning("message %s holds an unreadable metrics snapshot", row.id)
        if looked >= METRICS_LOOKBACK:
            break
    return None, None


@router.get("/{conversation_id}/context", response_model=ModelContext, response_model_exclude_none=True)
async def model_context(conversation_id: ConversationId, user: CurrentUser, db: Db, ctx: Ctx) -> ModelContext:
    """The model-visible context of the next turn: system prompt, history from the latest
    compaction checkpoint, and the latest context metrics snapshot."""
    conversation = await conversations.get_owned(db, user, conversation_id)
    resolved = await resolve_history(db, conversation)
    metrics, metrics_message_id = await _latest_metrics(db, conversation)
    return ModelContext(
        conversation_id=conversation.id,
        model=ctx.runner.model_for(conversation),
        system_prompt=ctx.runner.system_prompt,
        checkpoint_message_id=resolved.checkpoint_message_id,
        history=resolved.messages,
        metrics=metrics,
        metrics_message_id=metrics_message_id,
    )


@router.get("/{conversation_id}/messages/outline", response_model=OriginalsPage)
async def messages_outline(
    conversation: Readable,
    db: Db,
    before_message_id: BeforeMessageId = None,
    limit: Annotated[int, Query(ge=1, le=MAX_OUTLINE_ITEMS)] = 20,
) -> OriginalsPage:
    """User-visible messages before a point, oldest first, each with a short snippet."""
    return await originals.outline(db, conversation, before_message_id, limit)


@router.get("/{conversation_id}/messages/{message_id}/text", response_model=OriginalText)
async def message_text(
    conversation: Readable,
    message_id: MessageId,
    db: Db,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=0, le=MAX_TEXT_PAGE_CHARS)] = 20_000,
) -> OriginalText:
    """A page of one user-visible message's readable text, by character offset."""
    try:
        return await originals.read_original(db, conversation, message_id, offset, limit)
    except LookupError as exc:
        # The reader's words, so a remote `read_message` tells the model what package mode does.
        raise ApiError(404, "not_found", str(exc)) from None


def _reader(ctx: AppContext) -> DatabaseAttachmentReader:
    return DatabaseAttachmentReader(ctx.sessions, ctx.settings)


def _unavailable(exc: LookupError) -> ApiError:
    # The reader's message tells the model what happened (deleted, still processing, ...).
    return ApiError(404, "attachment_unavailable", str(exc))


@router.get("/{conversation_id}/attachments/{attachment_id}", response_model=AttachmentRef)
async def conversation_attachment(
    conversation: Readable, attachment_id: AttachmentId, ctx: Ctx
) -> AttachmentRef:
    """What chat_shell may know of an attachment of this conversation (or inherited by a fork)."""
    try:
        return await _reader(ctx).describe(conversation.id, attachment_id)
    except LookupError as exc:
        raise _unavailable(exc) from None


@router.get("/{conversation_id}/attachments/{attachment_id}/text", response_model=AttachmentPage)
async def conversation_attachment_text(
    conversation: Readable,
    attachment_id: AttachmentId,
    ctx: Ctx,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=0, le=MAX_TEXT_PAGE_CHARS)] = 20_000,
) -> AttachmentPage:
    """A page of an attachment's extracted text, scoped to this conversation."""
    try:
        return await _reader(ctx).read(conversation.id, attachment_id, offset, limit)
    except LookupError as exc:
        raise _unavailable(exc) from None
