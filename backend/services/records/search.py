"""Full-text search over the text of a user's own messages (README "Search").

Substring search, CJK included, case-insensitive, every character of the query taken as text
(SQL wildcards and FTS operators included). SQLite: the FTS5 trigram table `message_search`
(migration 0007) walked newest first, a query of 3 characters or more as one quoted phrase
(an index lookup), a shorter one (a two-character Chinese word) by reading the indexed text
until enough hits. PostgreSQL: `ILIKE` on the message text expression, first over the user's
most recently active conversations, then through the `pg_trgm` GIN index (from 3
characters). Only live conversations of the asking user are searched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, FromClause, Row, Select, column, func, literal_column, select, table
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Conversation, Message, User
from backend.services.errors import Invalid

# The longest query (characters); longer ones are refused, not cut.
MAX_QUERY = 200
# Text shown on each side of the match in a snippet (characters).
SNIPPET_CONTEXT = 60
# Trigram indexes serve queries of at least this many characters.
TRIGRAM = 3
# How many of the user's most recently active conversations are read before the index is asked.
RECENT_CONVERSATIONS = 10

_fts = table("message_search", column("rowid"), column("body"))


@dataclass(frozen=True)
class Snippet:
    before: str
    match: str
    after: str


@dataclass(frozen=True)
class Hit:
    conversation_id: int
    conversation_title: str
    message_id: int
    role: str
    created_at: datetime
    snippet: Snippet


# What a message is found by: a user message's text, an assistant message's reply. On
# PostgreSQL, literally the expression migration 0007 indexes (so the planner matches it).
POSTGRES_TEXT = literal_column(
    "(CASE WHEN role = 'assistant' THEN coalesce(result ->> 'value', '') ELSE content END)"
)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _phrase(text: str) -> str:
    """The query as one FTS5 string: operators and quotes inside it are text."""
    return '"' + text.replace('"', '""') + '"'


def snippet(text: str, query: str) -> Snippet:
    """The first occurrence of `query` in `text` with some text on each side, on one line."""
    found = re.search(re.escape(query), text, re.IGNORECASE)
    if found is None:  # the database folded case differently: show the start
        return Snippet("", "", _one_line(text[: 2 * SNIPPET_CONTEXT]).strip())
    start, end = found.span()
    before = text[max(0, start - SNIPPET_CONTEXT) : start]
    after = text[end : end + SNIPPET_CONTEXT]
    return Snippet(
        ("…" if start > SNIPPET_CONTEXT else "") + _one_line(before),
        _one_line(text[start:end]),
        _one_line(after) + ("…" if end + SNIPPET_CONTEXT < len(text) else ""),
    )


def _one_line(text: str) -> str:
    """Each run of white space as one space, those at the ends included: the space between
    the match and its neighbours stays."""
    return re.sub(r"\s+", " ", text)


def clean_query(query: str) -> str:
    query = query.strip()
    if not query:
        raise Invalid("empty_query", "type something to search for")
    if len(query) > MAX_QUERY:
        raise Invalid("query_too_long", f"a search is at most {MAX_QUERY} characters long")
    return query


async def search(db: AsyncSession, user: User, query: str, limit: int) -> list[Hit]:
    """The newest messages of the user containing `query`."""
    query = clean_query(query)
    if db.bind.dialect.name == "sqlite":
        rows = await _sqlite_rows(db, user, query, limit)
    else:
        rows = await _postgres_rows(db, user, query, limit)
    return [
        Hit(conversation_id, title, message_id, role, created_at, snippet(body or "", query))
        for conversation_id, title, message_id, role, created_at, body in rows
    ]


async def _sqlite_rows(db: AsyncSession, user: User, query: str, limit: int) -> Sequence[Row[Any]]:
    """The FTS table walked newest first (by rowid), so a common word stops at `limit` hits
    and a rare one is an index lookup: a quoted phrase from 3 characters; shorter queries
    read the indexed text, newest first, until `limit` hits."""
    if len(query) >= TRIGRAM:
        found = literal_column("message_search").op("MATCH")(_phrase(query))
    else:
        found = func.instr(func.lower(_fts.c.body), query.lower()) > 0
    stmt = (
        _hits(_fts.c.body, user.id, select_from=_fts.join(Message, Message.id == _fts.c.rowid))
        .where(found)
        .order_by(_fts.c.rowid.desc())
        .limit(limit)
    )
    return (await db.execute(stmt)).all()


async def _postgres_rows(db: AsyncSession, user: User, query: str, limit: int) -> Sequence[Row[Any]]:
    """The messages of the user's most recently active conversations first, read through the
    (conversation, message) index: a common word is found there in a few reads. Fewer than
    `limit` hits there: the trigram index over all the user's messages (a rare word is a
    lookup), newest first."""
    contains = POSTGRES_TEXT.ilike(f"%{_escape_like(query)}%", escape="\\")
    active = (
        select(Conversation.id)
        .where(Conversation.owner_id == user.id, Conversation.deleted_at.is_(None))
        .order_by(Conversation.updated_at.desc(), Conversation.id.desc())
        .limit(RECENT_CONVERSATIONS)
    )
    recent = (
        _hits(POSTGRES_TEXT, user.id)
        .where(Message.conversation_id.in_(active), contains)
        .order_by(Message.conversation_id.desc(), Message.message_id.desc())
        .limit(limit)
    )
    rows = (await db.execute(recent)).all()
    if len(rows) < limit:
        everywhere = _hits(POSTGRES_TEXT, user.id).where(contains).order_by(Message.id.desc()).limit(limit)
        rows = (await db.execute(everywhere)).all()
    return rows


def _hits(text: ColumnElement[str], owner_id: int, select_from: FromClause | None = None) -> Select[Any]:
    """The columns of a hit, in a live conversation of `owner_id`."""
    stmt = select(
        Message.conversation_id,
        Conversation.title,
        Message.message_id,
        Message.role,
        Message.created_at,
        text,
    )
    if select_from is not None:
        stmt = stmt.select_from(select_from)
    return stmt.join(Conversation, Conversation.id == Message.conversation_id).where(
        Conversation.owner_id == owner_id, Conversation.deleted_at.is_(None)
    )
