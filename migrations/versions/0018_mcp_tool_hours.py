"""Hourly rollup of MCP tool calls for the operators' dashboard

`mcp_tool_hours`: per hour (since the Unix epoch, UTC) x MCP server x tool x duration bin, the
calls, errors and timeouts and the bin's shortest and longest duration (docs/operations.md, the
dashboard). A few rows per tool and hour; no existing data to fill.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 07:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"


def upgrade() -> None:
    op.create_table(
        "mcp_tool_hours",
        sa.Column("hour", sa.Integer(), nullable=False),
        sa.Column("server", sa.String(64), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("duration_bin", sa.Integer(), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("timeouts", sa.Integer(), nullable=False),
        sa.Column("duration_min", sa.Float(), nullable=True),
        sa.Column("duration_max", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("hour", "server", "tool", "duration_bin"),
    )


def downgrade() -> None:
    op.drop_table("mcp_tool_hours")
