"""Sending messages (which starts a turn), editing, regenerating and retrying (versions in
place), showing a version, stopping, and the resumable stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, Query, Response, status
from sse_starlette import EventSourceResponse, JSONServerSentEvent
from starlette.background import BackgroundTask

from backend import instruments
from backend.api.deps import Ctx, CurrentPrincipal, CurrentUser, Db
from backend.api.params import AfterSeq, ConversationId, TurnIdQuery
from backend.context import AppContext
from backend.schemas.conversations import (
    ApprovalDecision,
    ApprovalOut,
    ConversationOut,
    MessageOut,
    SendMessage,
    ShowVersion,
    StopOut,
    TurnStartedOut,
    VersionRequest,
)
from backend.services.accounts import auth
from backend.services.conversations import branches, conversations, messages
from backend.services.delivery import streams, turns

router = APIRouter(prefix="/api/conversations", tags=["turns"])


async def _started_out(ctx: AppContext, started: turns.StartedTurn, wait: bool) -> TurnStartedOut:
    assistant = MessageOut.of(started.assistant_message)
    if wait:
        await ctx.runner.wait(started.turn_id)
        assistant = await messages.reread(ctx.sessions, started.assistant_message)
    return TurnStartedOut(
        turn_id=started.turn_id,
        user_message=MessageOut.of(started.user_message, started.attachments),
        assistant_message=assistant,
    )


@router.post(
    "/{conversation_id}/messages",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=TurnStartedOut,
)
async def send_message(
    conversation_id: ConversationId,
    body: SendMessage,
    user: CurrentUser,
    ctx: Ctx,
    response: Response,
    wait: Annotated[bool, Query(description="wait for the reply and return it (no SSE needed)")] = False,
) -> TurnStartedOut:
    started = await ctx.runner.send(
        user, conversation_id, body.content, body.attachment_ids, edits=body.edits
    )
    if wait:
        response.status_code = status.HTTP_200_OK
    return await _started_out(ctx, started, wait)


@router.post(
    "/{conversation_id}/regenerate",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=TurnStartedOut,
)
async def regenerate(
    conversation_id: ConversationId, user: CurrentUser, ctx: Ctx, body: VersionRequest | None = None
) -> TurnStartedOut:
    """A new version of a reply (`message_id`; default: the last one shown), in place: the
    question and its files stay, and so do the earlier versions. Also the retry of a failed,
    stopped or interrupted reply. 409 while a turn runs."""
    message_id = body.message_id if body is not None else None
    started = await ctx.runner.regenerate(user, conversation_id, message_id)
    return await _started_out(ctx, started, wait=False)


@router.post("/{conversation_id}/versions", response_model=ConversationOut)
async def show_version(
    conversation_id: ConversationId, body: ShowVersion, user: CurrentUser, db: Db
) -> ConversationOut:
    """Shows the version holding `message_id` (the newest message below it becomes the
    conversation's leaf); the page, the export and the next turn follow it. 409 while a turn
    runs: its reply stays where it is being written."""
    conversation = await conversations.get_owned(db, user, conversation_id)
    await branches.show_version(db, conversation, body.message_id)
    return ConversationOut.of(conversation)


@router.post("/{conversation_id}/stop", status_code=status.HTTP_202_ACCEPTED, response_model=StopOut)
async def stop(conversation_id: ConversationId, user: CurrentUser, db: Db, ctx: Ctx) -> StopOut:
    conversation = await conversations.get_owned(db, user, conversation_id)
    turn_id = await turns.turn_to_stop(db, conversation.id)
    await ctx.runner.request_stop(turn_id)
    return StopOut(turn_id=turn_id, status="stopping")


@router.post("/{conversation_id}/approvals", response_model=ApprovalOut)
async def decide(
    conversation_id: ConversationId, body: ApprovalDecision, user: CurrentUser, db: Db, ctx: Ctx
) -> ApprovalOut:
    """Allow or deny the "ask first" tool call the running turn waits on; the turn goes on."""
    conversation = await conversations.get_owned(db, user, conversation_id)
    turn_id = await turns.running_turn_id(db, conversation.id)
    decided = await ctx.runner.decide(turn_id, body.call_id, body.allow)
    return ApprovalOut(turn_id=decided, call_id=body.call_id, allowed=body.allow)


@router.get("/{conversation_id}/stream", response_model=None)
async def stream(
    conversation_id: ConversationId,
    principal: CurrentPrincipal,
    db: Db,
    ctx: Ctx,
    after: AfterSeq = None,
    turn_id: TurnIdQuery = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    """SSE of the running (or latest) turn: missed events first, then live ones. It closes when
    its session or token stops holding (account disabled, logged out, token revoked)."""
    user = principal.user
    conversation = await conversations.get_owned(db, user, conversation_id)
    resume = streams.parse_last_event_id(last_event_id) if last_event_id else None
    turn = await streams.choose_turn(db, conversation.id, resume, turn_id)
    if turn is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    after_seq = resume.after_seq if resume is not None else (after or 0)
    await streams.check_position(db, turn, after_seq)
    if streams.is_done(turn, after_seq):
        # 204 tells EventSource not to reconnect: the client has the whole turn.
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    slot = ctx.open_streams.reserve(user.id)  # 429 `too_many_streams` past the per-user limit
    if after_seq > 0:
        instruments.stream_resumes.add(1)

    session_id = principal.session.id if principal.session else None
    token_id = principal.token.id if principal.token else None

    async def signed_in() -> bool:
        return await auth.still_signed_in(ctx.sessions, session_id, token_id)

    # Set when this process begins to shut down (SIGTERM): the stream ends its slot and says
    # where to go, so the client reconnects to another replica at once.
    stopping = anyio.Event()

    async def events() -> AsyncIterator[JSONServerSentEvent]:
        instruments.active_streams.add(1)
        try:
            guard = streams.StreamGuard(slot, signed_in, ctx.settings.stream_auth_check_seconds)
            async with streams.ended_by(stopping, slot):
                async for event in streams.follow(
                    ctx.sessions, ctx.broker, turn.id, after_seq, ctx.settings.stream_log_poll_seconds, guard
                ):
                    yield JSONServerSentEvent(data=event.data, event=event.event, id=event.sse_id)
            if stopping.is_set():
                yield JSONServerSentEvent(
                    data={"reason": "server_stopping"}, event=streams.RECONNECT, retry=streams.RECONNECT_MS
                )
        finally:
            instruments.active_streams.add(-1)
            slot.release()

    # The slot also comes back when the stream never started (the client left first).
    return EventSourceResponse(
        events(),
        ping=ctx.settings.sse_ping_seconds,
        send_timeout=30,
        background=BackgroundTask(slot.release),
        shutdown_event=stopping,
        shutdown_grace_period=streams.SHUTDOWN_GRACE_SECONDS,
    )
