"""Versions in place: the messages of a conversation form a tree, and reads follow one path.

Each message names its parent (`parent_pk`; a fork's first message names the fork point in
the parent conversation, so a path crosses into the fork's ancestors by itself). Siblings are
versions: a regenerated reply, an edited question. The conversation remembers its current
leaf; the page, the export, the history tools and the model-visible history (SPEC 6.2) all
read the path from a message up to the root, newest first, one primary-key step per message
(a recursive query, on SQLite and PostgreSQL alike), so a read costs the rows it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from backend.models import Conversation, Message
from backend.services.conversations.conversations import running_turns
from backend.services.conversations.lineage import find_visible_message, lineage
from backend.services.errors import Conflict, NotFound


@dataclass(frozen=True)
class Step:
    """One message of a path, without its documents."""

    pk: int
    message_id: int
    has_checkpoint: bool


def walk_query(
    start_pk: int, *, limit: int | None = None, to_checkpoint: bool = False, to_below: int | None = None
) -> Select[Any]:
    """The path from `start_pk` up to the root as (id, message_id, has_checkpoint), newest
    first: at most `limit` messages, with `to_checkpoint` ending at the first message that
    holds a compaction checkpoint, with `to_below` at the first numbered below it (each
    included). One primary-key lookup per step."""
    walk = (
        select(
            Message.id,
            Message.parent_pk,
            Message.message_id,
            Message.has_checkpoint,
            literal(1).label("depth"),
        )
        .where(Message.id == start_pk)
        .cte("walk", recursive=True)
    )
    up = aliased(Message)
    # Parents are older rows (a smaller key), which also keeps a corrupt cycle from looping.
    going_on: ColumnElement[bool] = and_(up.id == walk.c.parent_pk, up.id < walk.c.id)
    if to_checkpoint:
        going_on = and_(going_on, walk.c.has_checkpoint == False)  # noqa: E712
    if limit is not None:
        going_on = and_(going_on, walk.c.depth < limit)
    if to_below is not None:
        going_on = and_(going_on, walk.c.message_id >= to_below)
    walk = walk.union_all(
        select(up.id, up.parent_pk, up.message_id, up.has_checkpoint, walk.c.depth + 1).where(going_on)
    )
    return select(walk.c.id, walk.c.message_id, walk.c.has_checkpoint).order_by(walk.c.depth)


async def steps(
    db: AsyncSession,
    start_pk: int | None,
    *,
    limit: int | None = None,
    to_checkpoint: bool = False,
    to_below: int | None = None,
) -> list[Step]:
    """The path from `start_pk` up to the root, newest first (`walk_query`)."""
    if start_pk is None or (limit is not None and limit <= 0):
        return []
    query = walk_query(start_pk, limit=limit, to_checkpoint=to_checkpoint, to_below=to_below)
    rows = await db.execute(query)
    return [Step(pk, message_id, bool(checkpoint)) for pk, message_id, checkpoint in rows]


async def load(db: AsyncSession, path: Sequence[Step]) -> list[Message]:
    """The messages of `path`, in its order."""
    if not path:
        return []
    found = {
        row.id: row for row in await db.scalars(select(Message).where(Message.id.in_([s.pk for s in path])))
    }
    return [found[step.pk] for step in path if step.pk in found]


async def start_before(
    db: AsyncSession, conversation: Conversation, before_message_id: int | None
) -> int | None:
    """Where a read of the messages before `before_message_id` starts: the parent of that
    message (its own path, whichever version is shown), the current leaf without one, and for
    a number no message has, the newest message of the current path numbered below it."""
    if before_message_id is None:
        return conversation.current_leaf_pk
    message = await find_visible_message(db, await lineage(db, conversation), before_message_id)
    if message is not None:
        return message.parent_pk
    # Message numbers grow along a path: the walk ends at the first one below the number.
    path = await steps(db, conversation.current_leaf_pk, to_below=before_message_id)
    return path[-1].pk if path and path[-1].message_id < before_message_id else None


async def versions(db: AsyncSession, rows: Sequence[Message]) -> dict[int, list[int]]:
    """For each row with siblings in its own conversation: the `message_id`s of its versions,
    oldest first (one query, on `ix_messages_parent`)."""
    parents: dict[int, set[int | None]] = {}
    for row in rows:
        parents.setdefault(row.conversation_id, set()).add(row.parent_pk)
    if not parents:
        return {}
    clauses = []
    for conversation_id, pks in parents.items():
        among = [Message.parent_pk.in_([pk for pk in pks if pk is not None])]
        if None in pks:
            among.append(Message.parent_pk.is_(None))
        clauses.append(and_(Message.conversation_id == conversation_id, or_(*among)))
    groups: dict[tuple[int, int | None], list[int]] = {}
    found = await db.execute(
        select(Message.conversation_id, Message.parent_pk, Message.message_id)
        .where(or_(*clauses))
        .order_by(Message.message_id)
    )
    for conversation_id, parent_pk, message_id in found:
        groups.setdefault((conversation_id, parent_pk), []).append(message_id)
    shown: dict[int, list[int]] = {}
    for row in rows:
        group = groups.get((row.conversation_id, row.parent_pk), [])
        if len(group) > 1:
            shown[row.id] = group
    return shown


async def newest_leaf(db: AsyncSession, message: Message) -> int:
    """The newest message below `message` in its conversation (itself when it has none): where
    showing a version takes the reader."""
    below = (
        select(Message.id, Message.message_id).where(Message.id == message.id).cte("below", recursive=True)
    )
    down = aliased(Message)
    below = below.union_all(
        select(down.id, down.message_id).where(
            down.parent_pk == below.c.id, down.conversation_id == message.conversation_id
        )
    )
    newest = await db.scalar(select(below.c.id).order_by(below.c.message_id.desc()).limit(1))
    assert newest is not None
    return newest


async def show_version(db: AsyncSession, conversation: Conversation, message_id: int) -> None:
    """Shows the version holding message `message_id` of this conversation: the leaf moves to
    the newest message below it. Refused while a turn runs: its reply stays on the path it is
    being written on, and the next send follows it."""
    if await running_turns(db, [conversation.id]):
        raise Conflict("turn_running", "a reply is being written; switch versions once it ends")
    message = await db.scalar(
        select(Message).where(Message.conversation_id == conversation.id, Message.message_id == message_id)
    )
    if message is None:
        raise NotFound.of("message")
    conversation.current_leaf_pk = await newest_leaf(db, message)
