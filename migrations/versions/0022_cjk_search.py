"""an index for search queries of one or two CJK characters

Both trigram indexes (migration 0010) need 3 characters, and most Chinese words have two: a
query like 上海 read every message. Indexed now: each CJK character of a message's text
(`chat_shell.languages.CJK_RANGES`) and each two of them side by side, the "grams"
a query shorter than 3 characters is looked up by. SQLite: the table `message_search_cjk`
(gram, message_id), a row per gram, walked newest first. PostgreSQL: the table
`message_search_cjk` (message_id, grams), a row per message with CJK text and a GIN index on
its grams, which the planner reads for a rare gram, or joins message by message while it
walks the newest messages for a common one. Both are kept current by triggers on messages (on
insert, on every update of the text, on delete: SQLite's next to those of `message_search`,
PostgreSQL's foreign key) and filled from the messages already stored.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 10:00:00.000000
"""

from alembic import op

from backend.services.search import POSTGRES_TEXT
from chat_shell.languages import CJK_RANGES

revision: str = "0022"
down_revision: str | None = "0021"

# A message's searchable text on SQLite, as migration 0010 indexes it.
SQLITE_TEXT = (
    "CASE WHEN {row}role = 'assistant' THEN coalesce(json_extract({row}result, '$.value'), '') "
    "ELSE {row}content END"
)
# SQLite reads a text as bytes (`substr` of a blob goes straight to an offset, of a text it
# counts the characters before it): in blocks, each cut in pieces, each read byte by byte. A
# block or piece holds the 7 bytes after it too, so a character and the next one (at most 8
# bytes of UTF-8) starting in it are whole in it. A long text is read once per block, a block
# once per piece, and a piece is small enough to be read in place.
BLOCK = 16_384
PIECE = 512
# Any CJK character, in a SQLite GLOB pattern or a PostgreSQL regular expression.
CJK_CLASS = "[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in CJK_RANGES) + "]"
# The first bytes of the UTF-8 of CJK characters lie in this range (a quick test before decoding).
LEAD_BYTES = (chr(CJK_RANGES[0][0]).encode()[:1].hex(), chr(CJK_RANGES[-1][1]).encode()[:1].hex())


def _sqlite_is_cjk(code: str) -> str:
    return "(" + " OR ".join(f"{code} BETWEEN {low} AND {high}" for low, high in CJK_RANGES) + ")"


def _sqlite_grams(where: str) -> str:
    """The (gram, message id) rows of the messages `where` selects: every CJK character of the
    text, and the pair it starts when the next character is CJK too. Texts without one are
    skipped at once."""
    text = f"CAST({SQLITE_TEXT.format(row='')} AS BLOB)"
    low, high = LEAD_BYTES
    first = "unicode(CAST(substr(piece, at, 4) AS TEXT))"
    return (
        "WITH RECURSIVE blocks(id, size, start, block) AS ("
        f"SELECT id, length({text}), 1, substr({text}, 1, {BLOCK + 7}) FROM messages "
        f"WHERE {where} AND {SQLITE_TEXT.format(row='')} GLOB '*{CJK_CLASS}*' "
        f"UNION ALL SELECT id, size, start + {BLOCK}, (SELECT substr({text}, blocks.start + {BLOCK}, "
        f"{BLOCK + 7}) FROM messages WHERE messages.id = blocks.id) "
        f"FROM blocks WHERE start + {BLOCK} <= size), "
        f"offsets(at) AS (SELECT 1 UNION ALL SELECT at + 1 FROM offsets WHERE at < {PIECE}), "
        f"pieces(id, piece) AS (SELECT id, substr(block, (at - 1) * {PIECE} + 1, {PIECE + 7}) "
        f"FROM blocks JOIN offsets ON at <= {BLOCK // PIECE} AND (at - 1) * {PIECE} < length(block)), "
        "pairs(id, pair) AS (SELECT id, substr(CAST(substr(piece, at, 8) AS TEXT), 1, 2) "
        f"FROM pieces JOIN offsets ON at <= length(piece) "
        f"WHERE substr(piece, at, 1) BETWEEN x'{low}' AND x'{high}' AND {_sqlite_is_cjk(first)}) "
        "SELECT substr(pair, 1, 1), id FROM pairs "
        f"UNION ALL SELECT pair, id FROM pairs WHERE {_sqlite_is_cjk('unicode(substr(pair, 2))')}"
    )


# The grams of a text, each once, in a PostgreSQL function (and its CJK characters found by
# regular expressions: a run of them at a time, then each and the one after it).
POSTGRES_GRAMS = (
    "CREATE FUNCTION message_search_cjk_grams(body text) RETURNS text[] LANGUAGE sql IMMUTABLE "
    "PARALLEL SAFE AS $$ SELECT coalesce(array_agg(DISTINCT gram), '{}') FROM ("
    "SELECT ch.c, lead(ch.c) OVER (PARTITION BY run.n ORDER BY ch.n) AS next "
    f"FROM regexp_matches(body, '{CJK_CLASS}+', 'g') WITH ORDINALITY AS run(m, n), "
    "regexp_split_to_table(run.m[1], '') WITH ORDINALITY AS ch(c, n)) AS chars, "
    "LATERAL (VALUES (chars.c), (chars.c || chars.next)) AS grams(gram) WHERE gram IS NOT NULL $$"
)


def _postgres_fill(where: str) -> str:
    """Index the messages `where` selects that have a CJK character: one row each."""
    return (
        "INSERT INTO message_search_cjk (message_id, grams) SELECT id, grams FROM (SELECT id, "
        f"message_search_cjk_grams({POSTGRES_TEXT}) AS grams FROM messages WHERE {where}) AS texts "
        "WHERE cardinality(grams) > 0"
    )


def _upgrade_postgres() -> None:
    op.execute(POSTGRES_GRAMS)
    # A message's row goes with it (the foreign key); GIN finds the messages with a gram.
    op.execute(
        "CREATE TABLE message_search_cjk (message_id BIGINT PRIMARY KEY "
        "REFERENCES messages (id) ON DELETE CASCADE, grams TEXT[] NOT NULL)"
    )
    op.execute("CREATE INDEX ix_message_search_cjk_grams ON message_search_cjk USING gin (grams)")
    op.execute(
        "CREATE FUNCTION message_search_cjk_keep() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "DELETE FROM message_search_cjk WHERE message_id = NEW.id; "
        f"{_postgres_fill('id = NEW.id')}; RETURN NULL; END $$"
    )
    for name, when in (("insert", "INSERT"), ("update", "UPDATE OF content, result, role")):
        op.execute(
            f"CREATE TRIGGER message_search_cjk_{name} AFTER {when} ON messages "
            "FOR EACH ROW EXECUTE FUNCTION message_search_cjk_keep()"
        )
    op.execute(_postgres_fill("true"))


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _upgrade_postgres()
        return
    op.execute(
        "CREATE TABLE message_search_cjk (gram TEXT NOT NULL, message_id INTEGER NOT NULL, "
        "PRIMARY KEY (gram, message_id)) WITHOUT ROWID"
    )
    # A message's rows are found by its grams (no second index by message: it would double the
    # table): they go before its text changes or it goes, while the old text is still there.
    fill = f"INSERT OR IGNORE INTO message_search_cjk (gram, message_id) {_sqlite_grams('id = new.id')}"
    forget = f"DELETE FROM message_search_cjk WHERE (gram, message_id) IN ({_sqlite_grams('id = old.id')})"
    update = "UPDATE OF content, result, role ON messages WHEN " + (
        f"({SQLITE_TEXT.format(row='old.')}) IS NOT ({SQLITE_TEXT.format(row='new.')})"
    )
    for name, when, action in (
        ("insert", "AFTER INSERT ON messages", fill),
        ("forget", f"BEFORE {update}", forget),
        ("update", f"AFTER {update}", fill),
        ("delete", "BEFORE DELETE ON messages", forget),
    ):
        op.execute(f"CREATE TRIGGER message_search_cjk_{name} {when} BEGIN {action}; END")
    op.execute(f"INSERT OR IGNORE INTO message_search_cjk (gram, message_id) {_sqlite_grams('true')}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for trigger in ("insert", "update"):
            op.execute(f"DROP TRIGGER message_search_cjk_{trigger} ON messages")
        op.execute("DROP FUNCTION message_search_cjk_keep()")
        op.execute("DROP TABLE message_search_cjk")
        op.execute("DROP FUNCTION message_search_cjk_grams(text)")
        return
    for trigger in ("insert", "forget", "update", "delete"):
        op.execute(f"DROP TRIGGER message_search_cjk_{trigger}")
    op.execute("DROP TABLE message_search_cjk")
