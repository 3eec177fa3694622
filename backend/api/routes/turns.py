"""Sending messages (which starts a turn), stopping, regenerating, and the resumable stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from sqlalchemy import select
from sse_starlette import EventSourceResponse, JSONServerSentEvent

from backend import instruments
from backend.api.deps import Ctx, CurrentUser, Db
from backend.api.errors import ApiError
from backend.api.routes.conversations import attachment_summaries, conversation_out, message_out
from backend.context import AppContext
from backend.db import transaction
from backend.models import Message, Role, Turn, TurnStatus, User
from backend.schemas.conversations import SendMessage, StopOut, TurnStartedOut
from backend.services import conversations, streams, turns

router = APIRouter(prefix="/api/conversations", tags=["turns"])


async def _start(ctx: AppContext, user: User, conversation_id: int, body: SendMessage) -> turns.StartedTurn:
    """Stores the messages in their own committed transaction, then starts the turn."""
    if not body.content.strip() and not body.attachment_ids:
        raise ApiError(422, "empty_message", "write a message or attach a file")
    async with transaction(ctx.sessions) as db:
        conversation = await conversations.get_owned(db, user, conversation_id)
        model = ctx.runner.model_for(conversation)
        started = await turns.start_turn(
            db, user, conversation, body.content, body.attachment_ids, ctx.runner.runner_id, model
        )
    ctx.runner.launch(started, model)
    return started


async def _started_out(ctx: AppContext, started: turns.StartedTurn, wait: bool) -> TurnStartedOut:
    assistant = started.assistant_message
    if wait:
        await ctx.runner.wait(started.turn_id)
        async with ctx.sessions() as fresh:
            reloaded = await fresh.get(Message, assistant.id)
            assert reloaded is not None
            assistant = reloaded
    return TurnStartedOut(
        turn_id=started.turn_id,
        user_message=message_out(started.user_message, attachment_summaries(started.attachments)),
        assistant_message=message_out(assistant),
    )


@router.post(
    "/{conversation_id}/messages", status_code=status.HTTP_202_ACCEPTED, response_model=TurnStartedOut
)
async def send_message(
    conversation_id: int,
    body: SendMessage,
    user: CurrentUser,
    ctx: Ctx,
    response: Response,
    wait: Annotated[bool, Query(description="wait for the reply and return it (no SSE needed)")] = False,
) -> TurnStartedOut:
    started = await _start(ctx, user, conversation_id, body)
    if wait:
        response.status_code = status.HTTP_200_OK
    return await _started_out(ctx, started, wait)


@router.post(
    "/{conversation_id}/regenerate", status_code=status.HTTP_202_ACCEPTED, response_model=TurnStartedOut
)
async def regenerate(conversation_id: int, user: CurrentUser, ctx: Ctx) -> TurnStartedOut:
    """Forks at the last user message and sends it again; the original stays as it was."""
    async with transaction(ctx.sessions) as db:
        conversation = await conversations.get_owned(db, user, conversation_id)
        levels = await conversations.lineage(db, conversation)
        rows, _ = await conversations.visible_messages(db, levels, None, 2)
        last_user = next((row for row in reversed(rows) if row.role == Role.USER), None)
        if last_user is None:
            raise ApiError(409, "nothing_to_regenerate", "there is no message to answer again")
        if any(row.status == "running" for row in rows):
            raise ApiError(409, "turn_running", "a reply is still being written; stop it first")
        fork = await conversations.fork(db, user, conversation, last_user.message_id - 1, conversation.title)
    started = await _start(ctx, user, fork.id, SendMessage(content=last_user.content))
    out = await _started_out(ctx, started, wait=False)
    out.conversation = conversation_out(fork, started.turn_id)
    return out


@router.post("/{conversation_id}/stop", status_code=status.HTTP_202_ACCEPTED, response_model=StopOut)
async def stop(conversation_id: int, user: CurrentUser, db: Db, ctx: Ctx) -> StopOut:
    conversation = await conversations.get_owned(db, user, conversation_id)
    turn_id = await db.scalar(
        select(Turn.id).where(Turn.conversation_id == conversation.id, Turn.status == TurnStatus.RUNNING)
    )
    if turn_id is None:
        raise ApiError(409, "no_running_turn", "nothing is being written in this conversation")
    await ctx.runner.request_stop(turn_id)
    return StopOut(turn_id=turn_id, status="stopping")


@router.get("/{conversation_id}/stream", response_model=None)
async def stream(
    conversation_id: int,
    user: CurrentUser,
    db: Db,
    ctx: Ctx,
    after: Annotated[int | None, Query(ge=0, description="the last seq already received")] = None,
    turn_id: Annotated[int | None, Query(ge=1)] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    """SSE of the running (or latest) turn: missed events first, then live ones."""
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

    if after_seq > 0:
        instruments.stream_resumes.add(1)

    async def events() -> AsyncIterator[JSONServerSentEvent]:
        instruments.active_streams.add(1)
        try:
            async for event in streams.follow(ctx.sessions, ctx.broker, turn.id, after_seq):
                yield JSONServerSentEvent(data=event.data, event=event.event, id=event.sse_id)
        finally:
            instruments.active_streams.add(-1)

    return EventSourceResponse(events(), ping=ctx.settings.sse_ping_seconds, send_timeout=30)
