"""Full-text search over the text of a user's own messages (docs/features.md "Search").

Substring search, CJK included, case-insensitive, every character of the query taken as text
(SQL wildcards and FTS operators included). SQLite: the FTS5 trigram table `message_search`
(migration 0010) walked newest first, a query of 3 characters or more as one quoted phrase
(an index lookup). PostgreSQL: `ILIKE` on the message text expression, first over the user's
most recently active conversations, then through the `pg_trgm` GIN index (from 3
characters). Both trigram indexes need 3 characters: a shorter query with CJK characters in
it (a two-character Chinese word) is looked up by them in the CJK index of migration 0022
instead (the table `message_search_cjk`: on SQLite walked newest first, on PostgreSQL after
the recent conversations, like the trigram index), any other short one reads the text until
enough hits. Only live conversations of the asking user are searched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    ColumnClause,
    ColumnElement,
    FromClause,
    Row,
    Select,
    Text,
    column,
    func,
    literal_column,
    select,
    table,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Conversation, Message, User
from backend.services.errors import Invalid
from chat_shell.languages import CJK_RANGES

# The longest query (characters); longer ones are refused, not cut.
MAX_QUERY = 200
# Text shown on each side of the match in a snippet (characters).
SNIPPET_CONTEXT = 60
# Trigram indexes serve queries of at least this many characters.
TRIGRAM = 3
# How many of the user's most recently active conversations are read before the index is asked.
RECENT_CONVERSATIONS = 10
# PostgreSQL: a gram of fewer messages than this in the CJK index is rare, and the messages it
# names are read by id; a more common one is found by walking the newest messages, as a short
# query was before the index (the planner cannot tell which order is cheaper by itself).
CJK_NAMED = 1000

_fts = table("message_search", column("rowid"), column("body"))
# Migration 0022's CJK index: on SQLite a row per gram of a message, on PostgreSQL a row per
# message with its grams (GIN-indexed).
_cjk = table("message_search_cjk", column("gram"), column("message_id"))
_cjk_grams = table("message_search_cjk", column("message_id"), column("grams", ARRAY(Text)))


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
# PostgreSQL, literally the expression migrations 0010 and 0022 index (so the planner matches it).
POSTGRES_TEXT: ColumnClause[str] = literal_column(
    "(CASE WHEN role = 'assistant' THEN coalesce(result ->> 'value', '') ELSE content END)"
)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _phrase(text: str) -> str:
    """The query as one FTS5 string: operators and quotes inside it are text."""
    return '"' + text.replace('"', '""') + '"'


def _cjk_gram(query: str) -> str | None:
    """What a query too short for the trigram indexes is looked up by in the CJK index: its CJK
    characters (one, or two side by side), None when it has none or is long enough."""
    if len(query) >= TRIGRAM:
        return None
    gram = "".join(char for char in query if any(low <= ord(char) <= high for low, high in CJK_RANGES))
    return gram or None


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
    if db.get_bind().dialect.name == "sqlite":
        rows = await _sqlite_rows(db, user, query, limit)
    else:
        rows = await _postgres_rows(db, user, query, limit)
    return [
        Hit(conversation_id, title, message_id, role, created_at, snippet(body or "", query))
        for conversation_id, title, message_id, role, created_at, body in rows
    ]


async def _sqlite_rows(
    db: AsyncSession, user: User, query: str, limit: int
) -> Sequence[Row[int, str, int, str, datetime, str]]:
    """An index walked newest first (by message id), so a common word stops at `limit` hits
    and a rare one is an index lookup: the FTS table with a quoted phrase from 3 characters,
    the CJK table with the CJK characters of a shorter query (each message it names checked
    in the text); other short queries read the indexed text, newest first, until `limit` hits."""
    gram = _cjk_gram(query)
    contains = func.instr(func.lower(_fts.c.body), query.lower()) > 0
    if gram is not None:
        source = _cjk.join(Message, Message.id == _cjk.c.message_id).join(_fts, _fts.c.rowid == Message.id)
        found: ColumnElement[bool] = (_cjk.c.gram == gram) & contains
        newest = _cjk.c.message_id.desc()
    else:
        source = _fts.join(Message, Message.id == _fts.c.rowid)
        phrase = literal_column("message_search").op("MATCH")(_phrase(query))
        found = phrase if len(query) >= TRIGRAM else contains
        newest = _fts.c.rowid.desc()
    stmt = _hits(_fts.c.body, user.id, select_from=source).where(found).order_by(newest).limit(limit)
    return (await db.execute(stmt)).all()


async def _postgres_rows(
    db: AsyncSession, user: User, query: str, limit: int
) -> Sequence[Row[int, str, int, str, datetime, str]]:
    """The messages of the user's most recently active conversations first, read through the
    (conversation, message) index: a common word is found there in a few reads. Fewer than
    `limit` hits there: an index over all the user's messages (a rare word is a lookup),
    newest first: the trigram one, or for a shorter query with CJK characters the CJK one,
    which names the messages with its rare grams."""
    pattern = f"%{_escape_like(query)}%"
    if len(query) >= TRIGRAM:
        contains: ColumnElement[bool] = POSTGRES_TEXT.ilike(pattern, escape="\\")
    else:
        # ILIKE's own test (on UTF-8 it lowers both sides), on an expression the trigram index
        # is not on: a generic plan of the prepared statement, blind to the query's length,
        # could otherwise ask that index, which for under 3 characters names every message.
        contains = func.lower(POSTGRES_TEXT).like(func.lower(pattern), escape="\\")
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
        gram = _cjk_gram(query)
        if gram is not None:
            named = await db.scalars(
                select(_cjk_grams.c.message_id).where(_cjk_grams.c.grams.contains([gram])).limit(CJK_NAMED)
            )
            ids = list(named)
            if len(ids) < CJK_NAMED:
                contains &= Message.id.in_(ids)
        everywhere = _hits(POSTGRES_TEXT, user.id).where(contains).order_by(Message.id.desc()).limit(limit)
        rows = (await db.execute(everywhere)).all()
    return rows


def _hits(
    text: ColumnElement[str], owner_id: int, select_from: FromClause | None = None
) -> Select[int, str, int, str, datetime, str]:
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
