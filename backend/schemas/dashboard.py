"""Bodies of the operators' dashboard endpoints (SPEC 7): figures only, never message text."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from chat_shell.contracts import ContextMetrics


class WindowOut(BaseModel):
    name: str
    start: datetime
    end: datetime
    bucket_seconds: int


class Totals(BaseModel):
    turns: int
    running_turns: int
    refusals: int
    overflow_errors: int
    failed_turns: int
    utilization_max: float | None
    compactions: int
    compactions_completed: int
    compaction_success_rate: float | None
    tokens_saved: int
    compaction_duration_p50_ms: float | None
    compaction_duration_p95_ms: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    retention_avg: float | None


class StrategyTotals(BaseModel):
    strategy: str
    count: int
    completed: int
    tokens_saved: int
    retention_avg: float | None


class McpToolTotals(BaseModel):
    """One MCP tool's calls over the window's hours (`errors` include a server gone mid-call)."""

    server: str
    tool: str
    calls: int
    errors: int
    timeouts: int
    duration_p50_ms: float | None
    duration_p95_ms: float | None


class TurnPoint(BaseModel):
    """One time bucket of turns; an empty bucket holds zeros and nulls."""

    start: datetime
    turns: int = 0
    utilization_avg: float | None = None
    utilization_max: float | None = None
    refusals: int = 0
    overflow_errors: int = 0
    failed: int = 0
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None


class CompactionPoint(BaseModel):
    """One time bucket of compactions; an empty bucket holds zeros and nulls."""

    start: datetime
    completed: int = 0
    fallback: int = 0
    tokens_saved: int = 0
    retention_avg: float | None = None
    retention_min: float | None = None
    duration_p50_ms: float | None = None
    duration_p95_ms: float | None = None


class PressureRow(BaseModel):
    """A conversation by its latest measured turn in the window."""

    conversation_id: int
    model_profile: str | None
    used_input: int
    available_input: int | None
    context_window: int | None
    utilization: float | None
    last_turn_at: datetime
    last_termination_reason: str | None
    turns: int
    refusals: int
    overflow_errors: int
    compactions: int
    compactions_completed: int


class Summary(BaseModel):
    window: WindowOut
    totals: Totals
    compactions_by_strategy: list[StrategyTotals]
    turns: list[TurnPoint]
    compactions: list[CompactionPoint]
    pressure: list[PressureRow]
    mcp_tools: list[McpToolTotals]


class TurnPressure(BaseModel):
    """One turn of a conversation's drill-down."""

    model_config = ConfigDict(from_attributes=True)

    turn_id: int
    started_at: datetime
    status: str
    termination_reason: str | None
    used_input: int | None
    available_input: int | None
    utilization: float | None
    input_tokens: int | None
    output_tokens: int | None
    ttft_ms: float | None
    refused: bool
    overflow_errors: int


class CompactionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    created_at: datetime
    turn_id: int | None
    strategy: str
    status: str
    before_tokens: int | None
    after_tokens: int | None
    tokens_saved: int | None
    duration_ms: float | None
    failure_reason: str | None
    retention_score: float | None


class ConversationDetail(BaseModel):
    """One conversation's pressure history: its latest stored snapshot, recent turns and
    compactions (no title, no text: operators see context pressure, not what was said)."""

    conversation_id: int
    model_profile: str | None
    latest_snapshot: ContextMetrics | None
    turns: list[TurnPressure]
    compactions: list[CompactionOut]
