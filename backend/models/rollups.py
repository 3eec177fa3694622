"""Hourly rollups of turns and compactions for the operators' dashboard.

One row per hour (hours since the Unix epoch, UTC) x model profile x value bin (the
time-to-first-token or compaction-duration bin of `services.dashboard.percentiles`, -1 for no
value), holding the same sums, counts and extremes the dashboard computes from the raw rows.
Written at the end of the transaction that starts or finishes a turn or records a compaction
(`services.dashboard.rollups`), so windows made of whole hours read a few thousand rows instead
of every turn. `conversation_pressure` keeps each conversation's latest measured turn the same
way, for the table of conversations under the most pressure. `mcp_tool_hours` counts MCP
tool calls per hour x server x tool x duration bin (the calls themselves are stored nowhere else
in a form SQL can group: their outputs live in the message's blocks).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.models.base import Base, UtcDateTime

NO_BIN = -1
NO_PROFILE = ""


class TurnHour(Base):
    __tablename__ = "turn_hours"

    hour: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_profile: Mapped[str] = mapped_column(String(100), primary_key=True)
    ttft_bin: Mapped[int] = mapped_column(Integer, primary_key=True)
    turns: Mapped[int] = mapped_column(Integer, default=0)
    utilization_sum: Mapped[float] = mapped_column(Float, default=0.0)
    utilization_count: Mapped[int] = mapped_column(Integer, default=0)
    utilization_max: Mapped[float | None] = mapped_column(Float, nullable=True)
    refusals: Mapped[int] = mapped_column(Integer, default=0)
    overflow_errors: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    ttft_min: Mapped[float | None] = mapped_column(Float, nullable=True)
    ttft_max: Mapped[float | None] = mapped_column(Float, nullable=True)


class CompactionHour(Base):
    __tablename__ = "compaction_hours"

    hour: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_profile: Mapped[str] = mapped_column(String(100), primary_key=True)
    strategy: Mapped[str] = mapped_column(String(32), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    duration_bin: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    tokens_saved: Mapped[int] = mapped_column(BigInteger, default=0)
    retention_sum: Mapped[float] = mapped_column(Float, default=0.0)
    retention_count: Mapped[int] = mapped_column(Integer, default=0)
    retention_min: Mapped[float | None] = mapped_column(Float, nullable=True)
    duration_min: Mapped[float | None] = mapped_column(Float, nullable=True)
    duration_max: Mapped[float | None] = mapped_column(Float, nullable=True)


class McpToolHour(Base):
    __tablename__ = "mcp_tool_hours"

    hour: Mapped[int] = mapped_column(Integer, primary_key=True)
    server: Mapped[str] = mapped_column(String(64), primary_key=True)
    tool: Mapped[str] = mapped_column(String(200), primary_key=True)
    duration_bin: Mapped[int] = mapped_column(Integer, primary_key=True)
    calls: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    timeouts: Mapped[int] = mapped_column(Integer, default=0)
    duration_min: Mapped[float | None] = mapped_column(Float, nullable=True)
    duration_max: Mapped[float | None] = mapped_column(Float, nullable=True)


class ConversationPressure(Base):
    """Each conversation's latest turn with a context snapshot, and its utilisation."""

    __tablename__ = "conversation_pressure"

    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    turn_id: Mapped[int] = mapped_column(BigInteger)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    utilization: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
