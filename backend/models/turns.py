"""Turns (one run of the agent per user message) and their durable, ordered event log."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from backend.models.base import Base, BigId, JsonDoc, UtcDateTime, utcnow


class TurnStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


class Turn(Base):
    __tablename__ = "turns"
    __table_args__ = (
        # At most one running turn per conversation, enforced by the database across replicas.
        Index(
            "uq_turns_one_running",
            "conversation_id",
            unique=True,
            sqlite_where=text("status = 'running'"),
            postgresql_where=text("status = 'running'"),
        ),
        # Covers the dashboard's time-window aggregates (migration 0004).
        Index(
            "ix_turns_dashboard",
            "started_at",
            "conversation_id",
            "context_used_tokens",
            "context_available_tokens",
            "ttft_ms",
            "refused",
            "overflow_errors",
            "status",
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    user_message_pk: Mapped[int] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"))
    assistant_message_pk: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[str] = mapped_column(String(16), default=TurnStatus.RUNNING)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The seq of the terminal event, set when the turn ends (0 while it runs).
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    # A stop, stored before it is acknowledged (the queue carries it to the worker).
    stop_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # Set once the event rows were pruned; replay is then synthesized from the stored message.
    events_pruned_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # Per-turn figures for operators' dashboards, aggregated in SQL.
    model_profile: Mapped[str | None] = mapped_column(String(100), nullable=True)
    termination_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    input_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    output_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    context_used_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    context_available_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    context_window: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ttft_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    overflow_errors: Mapped[int] = mapped_column(Integer, default=0)
    refused: Mapped[bool] = mapped_column(default=False)
    # The model requests of the turn as sent (`backend.services.records.model_requests`); kept
    # for the conversation's latest turn only.
    model_requests: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc, nullable=True)


class TurnEvent(Base):
    """One numbered event of a turn; `seq` starts at 1 and never has gaps."""

    __tablename__ = "turn_events"
    __table_args__ = (UniqueConstraint("turn_id", "seq", name="uq_turn_events_turn_seq"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    turn_id: Mapped[int] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    event: Mapped[str] = mapped_column(String(32))
    data: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class CompactionEvent(Base):
    """One row per compaction attempt, so dashboards aggregate without reading message JSON."""

    __tablename__ = "compaction_events"
    __table_args__ = (
        # Covers the dashboard's time-window aggregates (migration 0004).
        Index(
            "ix_compaction_events_dashboard",
            "created_at",
            "strategy",
            "status",
            "tokens_saved",
            "duration_ms",
            "retention_score",
            "conversation_id",
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    turn_id: Mapped[int | None] = mapped_column(ForeignKey("turns.id", ondelete="SET NULL"), nullable=True)
    assistant_message_pk: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), nullable=True
    )
    model_profile: Mapped[str | None] = mapped_column(String(100), nullable=True)
    strategy: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    before_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    after_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tokens_saved: Mapped[int | None] = mapped_column(Integer, nullable=True)
    duration_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    failure_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    retention_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
