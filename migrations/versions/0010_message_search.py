"""full-text search over the text of every message, CJK included (substring search)

A message's searchable text is what its owner reads: a user message's `content`, an assistant
message's reply (`result.value`). SQLite: an FTS5 table with the trigram tokenizer
(`message_search`, rowid = `messages.id`), kept current by triggers on insert, on every update
of the text (send, turn end) and on delete. PostgreSQL: `pg_trgm` and a trigram GIN index on
the same expression, current by construction. Both are filled from the rows already stored.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 23:58:00.000000
"""

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"

# The expression backend/services/search.py queries (one per dialect).
SQLITE_TEXT = (
    "CASE WHEN {row}role = 'assistant' THEN coalesce(json_extract({row}result, '$.value'), '') "
    "ELSE {row}content END"
)
POSTGRES_TEXT = "(CASE WHEN role = 'assistant' THEN coalesce(result ->> 'value', '') ELSE content END)"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        op.execute(
            f"CREATE INDEX ix_messages_search_trgm ON messages USING gin ({POSTGRES_TEXT} gin_trgm_ops)"
        )
        return
    new, old = SQLITE_TEXT.format(row="new."), "old.id"
    op.execute("CREATE VIRTUAL TABLE message_search USING fts5(body, tokenize = 'trigram')")
    op.execute(
        "CREATE TRIGGER message_search_insert AFTER INSERT ON messages BEGIN "
        f"INSERT INTO message_search (rowid, body) VALUES (new.id, {new}); END"
    )
    op.execute(
        "CREATE TRIGGER message_search_update AFTER UPDATE OF content, result, role ON messages BEGIN "
        f"DELETE FROM message_search WHERE rowid = {old}; "
        f"INSERT INTO message_search (rowid, body) VALUES (new.id, {new}); END"
    )
    op.execute(
        f"CREATE TRIGGER message_search_delete AFTER DELETE ON messages BEGIN "
        f"DELETE FROM message_search WHERE rowid = {old}; END"
    )
    op.execute(
        f"INSERT INTO message_search (rowid, body) SELECT id, {SQLITE_TEXT.format(row='')} FROM messages"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_messages_search_trgm")
        return
    for trigger in ("insert", "update", "delete"):
        op.execute(f"DROP TRIGGER message_search_{trigger}")
    op.execute("DROP TABLE message_search")
