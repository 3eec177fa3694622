"""Fork lineage: a conversation and the ancestors whose messages it inherits.

A fork inherits its parent's messages up to the fork point and numbers its own after it, so
the ranges of the levels never overlap and `message_id` stays monotonic along the lineage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Conversation, Message
from backend.services.errors import Corrupt, Invalid

MAX_FORK_DEPTH = 50


@dataclass(frozen=True)
class LineageLevel:
    """Messages of `conversation_id` with `low < message_id <= high` belong to the lineage."""

    conversation_id: int
    low: int
    high: int | None

    def holds(self, message_id: int) -> bool:
        return message_id > self.low and (self.high is None or message_id <= self.high)


async def lineage(db: AsyncSession, conversation: Conversation) -> list[LineageLevel]:
    """The conversation and its fork ancestors, newest range first."""
    levels = [LineageLevel(conversation.id, conversation.forked_from_message_id or 0, None)]
    seen = {conversation.id}
    parent_id, high = conversation.forked_from_conversation_id, conversation.forked_from_message_id
    while parent_id is not None and high is not None:
        if parent_id in seen:
            raise Corrupt("fork_cycle", "the conversation's fork lineage has a cycle")
        if len(levels) > MAX_FORK_DEPTH:
            raise Invalid("fork_too_deep", f"forks may be nested at most {MAX_FORK_DEPTH} deep")
        seen.add(parent_id)
        parent = await db.get(Conversation, parent_id)
        if parent is None:
            break
        low = parent.forked_from_message_id or 0
        levels.append(LineageLevel(parent.id, low, high))
        if parent.forked_from_message_id is not None:
            high = min(high, parent.forked_from_message_id)
        parent_id = parent.forked_from_conversation_id
    return levels


async def find_visible_message(
    db: AsyncSession, levels: Sequence[LineageLevel], message_id: int
) -> Message | None:
    """The message numbered `message_id` in the level of the lineage that holds the number."""
    for level in levels:
        if level.holds(message_id):
            return await db.scalar(
                select(Message).where(
                    Message.conversation_id == level.conversation_id, Message.message_id == message_id
                )
            )
    return None
