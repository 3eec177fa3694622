"""versions in place: messages form a tree inside a conversation (issue 22)

`messages.parent_pk` names the message a message follows (a fork's first message: the fork
point in its parent conversation); siblings are versions (a regenerated reply, an edited
question). `messages.attachments_of_pk`: an edited question carries the files of the message
it edits. `conversations.current_leaf_pk`: the newest message of the version shown.

Existing conversations become single-path trees: each message's parent is the message before
it, a fork's first message follows the fork point, and the leaf is the newest message.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 03:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
MAX_FORK_DEPTH = 50


def _fork_point(connection: sa.Connection, conversation_id: int, message_id: int) -> int | None:
    """The message a fork at `message_id` of `conversation_id` follows: the newest one at or
    before the fork point along the parent's own fork lineage."""
    high = message_id
    for _ in range(MAX_FORK_DEPTH):
        parent = connection.execute(
            sa.text(
                "SELECT forked_from_conversation_id, forked_from_message_id FROM conversations WHERE id = :id"
            ),
            {"id": conversation_id},
        ).first()
        if parent is None:
            return None
        found = connection.execute(
            sa.text(
                "SELECT id FROM messages WHERE conversation_id = :c AND message_id <= :high "
                "AND message_id > :low ORDER BY message_id DESC LIMIT 1"
            ),
            {"c": conversation_id, "high": high, "low": parent.forked_from_message_id or 0},
        ).scalar()
        if found is not None:
            return found
        if parent.forked_from_conversation_id is None or parent.forked_from_message_id is None:
            return None
        conversation_id = parent.forked_from_conversation_id
        high = min(high, parent.forked_from_message_id)
    return None


def upgrade() -> None:
    # Plain columns (no foreign keys): adding one on SQLite would rebuild `messages` and drop
    # its search triggers (0010). The references are kept by the code that writes them.
    op.add_column("messages", sa.Column("parent_pk", BIG_ID, nullable=True))
    op.add_column("messages", sa.Column("attachments_of_pk", BIG_ID, nullable=True))
    op.create_index(
        "ix_messages_parent", "messages", ["conversation_id", "parent_pk", "message_id"], unique=False
    )
    op.add_column("conversations", sa.Column("current_leaf_pk", BIG_ID, nullable=True))

    connection = op.get_bind()
    # One path per conversation: each message follows the one before it (the unique
    # (conversation_id, message_id) key serves the lookup).
    connection.execute(
        sa.text(
            "UPDATE messages SET parent_pk = (SELECT p.id FROM messages p "
            "WHERE p.conversation_id = messages.conversation_id AND p.message_id < messages.message_id "
            "ORDER BY p.message_id DESC LIMIT 1)"
        )
    )
    connection.execute(
        sa.text(
            "UPDATE conversations SET current_leaf_pk = (SELECT m.id FROM messages m "
            "WHERE m.conversation_id = conversations.id ORDER BY m.message_id DESC LIMIT 1)"
        )
    )
    forks = connection.execute(
        sa.text(
            "SELECT id, forked_from_conversation_id, forked_from_message_id, current_leaf_pk "
            "FROM conversations WHERE forked_from_conversation_id IS NOT NULL "
            "AND forked_from_message_id > 0"
        )
    ).all()
    for fork in forks:
        point = _fork_point(connection, fork.forked_from_conversation_id, fork.forked_from_message_id)
        if point is None:
            continue
        connection.execute(
            sa.text(
                "UPDATE messages SET parent_pk = :point WHERE conversation_id = :c AND parent_pk IS NULL"
            ),
            {"point": point, "c": fork.id},
        )
        if fork.current_leaf_pk is None:
            connection.execute(
                sa.text("UPDATE conversations SET current_leaf_pk = :point WHERE id = :c"),
                {"point": point, "c": fork.id},
            )


def downgrade() -> None:
    op.drop_column("conversations", "current_leaf_pk")
    op.drop_index("ix_messages_parent", table_name="messages")
    op.drop_column("messages", "attachments_of_pk")
    op.drop_column("messages", "parent_pk")
