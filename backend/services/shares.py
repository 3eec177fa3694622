"""Read-only share links of a conversation (issue 22).

A link is a snapshot: it shows the conversation's current path as it ends when the link is made
(its leaf), so what the owner sends afterwards is never shared. The token is 256 random bits
and the only secret; a revoked link, a deleted conversation or an unknown token read alike (404).
The shared view carries the user-visible text only; files are listed (names, types, sizes) only
when the owner asked for it, and their contents are never served.
"""

from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Conversation, Message, ShareLink, User
from backend.models.base import utcnow
from backend.schemas.conversations import AttachmentSummary
from backend.schemas.shares import SharedConversation, SharedMessage
from backend.services.conversations import branches
from backend.services.conversations.messages import attachments_by_message
from backend.services.errors import Invalid, NotFound

TOKEN_BYTES = 32


def _not_found() -> NotFound:
    return NotFound("this share link does not exist or was revoked")


async def create(db: AsyncSession, conversation: Conversation, *, include_attachments: bool) -> ShareLink:
    if conversation.current_leaf_pk is None:
        raise Invalid("nothing_to_share", "the conversation has no messages to share yet")
    link = ShareLink(
        token=secrets.token_urlsafe(TOKEN_BYTES),
        conversation_id=conversation.id,
        leaf_pk=conversation.current_leaf_pk,
        include_attachments=include_attachments,
    )
    db.add(link)
    await db.flush()
    return link


async def active(db: AsyncSession, conversation: Conversation) -> list[ShareLink]:
    rows = await db.scalars(
        select(ShareLink)
        .where(ShareLink.conversation_id == conversation.id, ShareLink.revoked_at.is_(None))
        .order_by(ShareLink.id)
    )
    return list(rows)


async def revoke(db: AsyncSession, user: User, token: str) -> None:
    """Revokes one of `user`'s links (another user's reads as missing)."""
    link = await db.scalar(
        select(ShareLink)
        .join(Conversation, Conversation.id == ShareLink.conversation_id)
        .where(ShareLink.token == token, Conversation.owner_id == user.id, ShareLink.revoked_at.is_(None))
    )
    if link is None:
        raise _not_found()
    link.revoked_at = utcnow()


def _shown(message: Message, files: list[AttachmentSummary]) -> SharedMessage:
    result = message.result or {}
    blocks = result.get("blocks") or []
    return SharedMessage(
        role=message.role,
        status=message.status,
        text=message.content if message.role == "user" else str(result.get("value") or ""),
        created_at=message.created_at,
        model=result.get("model"),
        tools=[str(block.get("name")) for block in blocks if block.get("type") == "tool"],
        attachments=files,
    )


async def shared(db: AsyncSession, token: str) -> SharedConversation:
    """What the link shows, for anyone who has it."""
    found = (
        await db.execute(
            select(ShareLink, Conversation)
            .join(Conversation, Conversation.id == ShareLink.conversation_id)
            .where(
                ShareLink.token == token, ShareLink.revoked_at.is_(None), Conversation.deleted_at.is_(None)
            )
        )
    ).one_or_none()
    if found is None:
        raise _not_found()
    link, conversation = found
    rows = list(reversed(await branches.load(db, await branches.steps(db, link.leaf_pk))))
    files = await attachments_by_message(db, rows) if link.include_attachments else {}
    return SharedConversation(
        title=conversation.title,
        shared_at=link.created_at,
        messages=[
            _shown(row, [AttachmentSummary.model_validate(f) for f in files.get(row.id, [])]) for row in rows
        ],
    )
