"""Secrets and turn capabilities as a service-mode backend has them, for tests."""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Conversation, Message, Role, Turn, TurnStatus, User
from backend.models.base import utcnow
from backend.secret_policy import new_secret
from backend.services.delivery import capabilities, turns

# Strong secrets (what `make env` writes), one pair per test session.
SERVICE_TOKEN = new_secret()
CAPABILITY_KEY = new_secret()


def capability(
    turn_id: int, conversation_id: int, owner_id: int, *, seconds: int = 600, key: str = CAPABILITY_KEY
) -> str:
    grant = capabilities.Capability(turn_id, conversation_id, owner_id, int(time.time()) + seconds)
    return capabilities.mint(key.encode(), grant)


async def running_turn(sessions: async_sessionmaker[AsyncSession], conversation_id: int) -> int:
    """The conversation's running turn (what a capability is minted for). A new one is marked
    running on its newest user and assistant messages, so the history stays as seeded; in a
    conversation without messages of its own, a real send's records."""
    async with sessions() as db, db.begin():
        running = await turns.running_turn_id(db, conversation_id)
        if running is not None:
            return running
        conversation = await db.get_one(Conversation, conversation_id)
        newest = {
            role: await db.scalar(
                select(Message.id)
                .where(Message.conversation_id == conversation_id, Message.role == role)
                .order_by(Message.message_id.desc())
                .limit(1)
            )
            for role in (Role.USER, Role.ASSISTANT)
        }
        if newest[Role.USER] is None or newest[Role.ASSISTANT] is None:
            owner = await db.get_one(User, conversation.owner_id)
            started = await turns.start_turn(db, owner, conversation, "hello", (), None)
            return started.turn_id
        turn = Turn(
            conversation_id=conversation_id,
            user_message_pk=newest[Role.USER],
            assistant_message_pk=newest[Role.ASSISTANT],
            status=TurnStatus.RUNNING,
            started_at=utcnow(),
        )
        db.add(turn)
        await db.flush()
        return turn.id


async def end_turn(sessions: async_sessionmaker[AsyncSession], turn_id: int) -> None:
    async with sessions() as db, db.begin():
        turn = await db.get_one(Turn, turn_id)
        turn.status = TurnStatus.COMPLETED
        turn.ended_at = utcnow()
