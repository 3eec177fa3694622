"""accounts and admin (issue 21): disabled accounts, session details, the operators' audit log

`users.disabled_at` marks an account an operator disabled (it cannot log in; its sessions end
and its tokens are revoked). `sessions.last_seen_at` and `sessions.user_agent` describe each
browser session on the account page. `audit_events` records every operator action on accounts
and invite codes: who, what, on whom, when (names are kept as they were at the time).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 03:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("user_agent", sa.String(length=255), nullable=True))
    op.create_table(
        "audit_events",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_id", BIG_ID, nullable=True),
        sa.Column("actor_name", sa.String(length=64), nullable=True),
        sa.Column("action", sa.String(length=40), nullable=False),
        sa.Column("target_id", BIG_ID, nullable=True),
        sa.Column("target_name", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["actor_id"], ["users.id"], name=op.f("fk_audit_events_actor_id_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["target_id"], ["users.id"], name=op.f("fk_audit_events_target_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )


def downgrade() -> None:
    op.drop_table("audit_events")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("user_agent")
        batch.drop_column("last_seen_at")
    # Not in batch mode: rebuilding `users` on SQLite would lose its expression index
    # (lower(username), 0006); SQLite 3.35+ drops a plain column in place.
    op.drop_column("users", "disabled_at")
