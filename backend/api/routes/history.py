"""The model-visible side of a conversation, and what a remote chat_shell reads for one turn.

- `GET .../history`: the model-visible history (SPEC 6.2), markers included.
- `GET .../context`: what the model will see next turn, for the owner (never the transcript).
- `GET .../model-request`: the latest turn's last model request as sent, for the owner.
- `GET .../next-model-request`: the request the next turn would send, before the user sends.
- `GET .../messages/outline`, `GET .../messages/{message_id}/text`: the user-visible record as
  the `list_history` / `read_message` tools read it.
- `GET .../attachments/{attachment_id}`, `.../text` and `.../image`: an attachment of this
  conversation, as the `AttachmentReader` contract describes and reads it.

Everything here except `context` also answers a turn capability (service mode) scoped to the
conversation while its turn runs; any other conversation answers 404, as for other users'
objects, and a capability of a turn that has ended answers 401.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from backend.api.deps import Ctx, CurrentUser, Db, current_principal
from backend.api.params import AttachmentId, BeforeMessageId, ConversationId, MessageId, TextPage
from backend.context import AppContext
from backend.models import Conversation
from backend.models.base import MAX_INT
from backend.schemas.history import ModelContext
from backend.schemas.model_requests import ModelRequestView
from backend.services.attachments.reader import DatabaseAttachmentReader
from backend.services.conversations import conversations
from backend.services.delivery import capabilities
from backend.services.records import model_requests, originals
from backend.services.records.history import latest_metrics, prompt_tokens, resolve_history
from chat_shell.contracts import (
    MAX_OUTLINE_ITEMS,
    AttachmentImage,
    AttachmentPage,
    AttachmentRef,
    ModelHistory,
    OriginalsPage,
    OriginalText,
)

router = APIRouter(prefix="/api/conversations", tags=["history"])


async def readable_conversation(
    conversation_id: ConversationId, request: Request, db: Db, ctx: Ctx
) -> Conversation:
    """The conversation, for its owner (session or API token) or a turn capability scoped to it."""
    scheme, _, secret = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and capabilities.is_capability(secret.strip()):
        return await capabilities.granted_conversation(
            db, ctx.capability_key, secret.strip(), conversation_id
        )
    principal = await current_principal(request)
    return await conversations.get_owned(db, principal.user, conversation_id)


Readable = Annotated[Conversation, Depends(readable_conversation)]


@router.get("/{conversation_id}/history", response_model=ModelHistory, response_model_exclude_none=True)
async def model_history(
    conversation: Readable,
    db: Db,
    from_latest_compaction: bool = True,
    before_message_id: BeforeMessageId = None,
    limit: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
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


@router.get("/{conversation_id}/context", response_model=ModelContext, response_model_exclude_none=True)
async def model_context(conversation_id: ConversationId, user: CurrentUser, db: Db, ctx: Ctx) -> ModelContext:
    """The model-visible context of the next turn: system prompt, history from the latest
    compaction checkpoint, and the latest context metrics snapshot."""
    conversation = await conversations.get_owned(db, user, conversation_id)
    resolved = await resolve_history(db, conversation)
    metrics, metrics_message_id = await latest_metrics(db, conversation)
    model = ctx.runner.model_for(conversation)
    return ModelContext(
        conversation_id=conversation.id,
        model=model,
        system_prompt_tokens=prompt_tokens(ctx.config, model, ctx.runner.system_prompt),
        instructions=conversation.instructions,
        checkpoint_message_id=resolved.checkpoint_message_id,
        history=resolved.messages,
        metrics=metrics,
        metrics_message_id=metrics_message_id,
    )


@router.get("/{conversation_id}/model-request", response_model=ModelRequestView)
async def model_request(
    conversation_id: ConversationId, user: CurrentUser, db: Db, ctx: Ctx
) -> ModelRequestView:
    """The last model request of the latest finished turn, as sent, entry by entry; the
    operator's system prompt text for operators only."""
    conversation = await conversations.get_owned(db, user, conversation_id)
    operator_prompt = ctx.runner.system_prompt if user.is_operator else None
    return await model_requests.latest_request(db, conversation, operator_prompt=operator_prompt)


@router.get("/{conversation_id}/next-model-request", response_model=ModelRequestView)
async def next_model_request(
    conversation_id: ConversationId, user: CurrentUser, db: Db, ctx: Ctx
) -> ModelRequestView:
    """The request the next turn would send before the user's message (the guard's stages run
    over what it starts from, no model called), entry by entry like a sent one."""
    conversation = await conversations.get_owned(db, user, conversation_id)
    return await model_requests.next_request(
        db,
        conversation,
        ctx.runner.previewer,
        model=ctx.runner.model_for(conversation),
        system_prompt=ctx.runner.system_prompt,
        operator_prompt=ctx.runner.system_prompt if user.is_operator else None,
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
async def message_text(conversation: Readable, message_id: MessageId, db: Db, page: TextPage) -> OriginalText:
    """A page of one user-visible message's readable text, by character offset."""
    # An unknown message answers 404 in the reader's words, so a remote `read_message` tells
    # the model what package mode does.
    return await originals.read_original(db, conversation, message_id, page.offset, page.limit)


def _reader(ctx: AppContext) -> DatabaseAttachmentReader:
    return DatabaseAttachmentReader(ctx.sessions, ctx.settings)


@router.get("/{conversation_id}/attachments/{attachment_id}", response_model=AttachmentRef)
async def conversation_attachment(
    conversation: Readable, attachment_id: AttachmentId, ctx: Ctx
) -> AttachmentRef:
    """What chat_shell may know of an attachment of this conversation (or inherited by a fork)."""
    return await _reader(ctx).describe(conversation.id, attachment_id)


@router.get("/{conversation_id}/attachments/{attachment_id}/text", response_model=AttachmentPage)
async def conversation_attachment_text(
    conversation: Readable, attachment_id: AttachmentId, ctx: Ctx, page: TextPage
) -> AttachmentPage:
    """A page of an attachment's extracted text, scoped to this conversation."""
    return await _reader(ctx).read(conversation.id, attachment_id, page.offset, page.limit)


@router.get("/{conversation_id}/attachments/{attachment_id}/image", response_model=AttachmentImage)
async def conversation_attachment_image(
    conversation: Readable, attachment_id: AttachmentId, ctx: Ctx
) -> AttachmentImage:
    """An image attachment's bytes for a model that accepts images, scoped to this conversation."""
    return await _reader(ctx).image(conversation.id, attachment_id)
