"""The events a turn streams (`TurnEvent`), in-process or as SSE data in service mode."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from chat_shell.contracts.history import ChainMessage
from chat_shell.contracts.metrics import CompactionRecord, ContextMetrics
from chat_shell.contracts.wire import TurnResult


class TurnStarted(BaseModel):
    type: Literal["turn.started"] = "turn.started"
    model: str
    profile: str


class MessageDelta(BaseModel):
    type: Literal["message.delta"] = "message.delta"
    text: str


class ToolCallEvent(BaseModel):
    """An event about one tool call the model made, as the stream shows the call; `type` is
    each event's own literal."""

    type: str
    call_id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    # The MCP server whose tool this is (None: a built-in tool).
    server: str | None = None


class ToolStarted(ToolCallEvent):
    type: Literal["tool.started"] = "tool.started"


class ToolCompleted(BaseModel):
    type: Literal["tool.completed"] = "tool.completed"
    call_id: str
    name: str
    output: str
    is_error: bool = False
    truncated_for_model: bool = False
    # An MCP call that reached its server's client: how it ended and how long it ran (None
    # for built-in tools and for calls that never ran, e.g. denied).
    mcp_outcome: Literal["ok", "error", "timeout", "unavailable", "cancelled"] | None = None
    duration_ms: float | None = None


class ApprovalRequested(ToolCallEvent):
    """An "ask first" tool call waits for the user's decision (it follows its `tool.started`)."""

    type: Literal["approval.requested"] = "approval.requested"


class ApprovalDecided(BaseModel):
    """The user's decision on a waiting call: allowed, it runs; denied, the model is told so."""

    type: Literal["approval.decided"] = "approval.decided"
    call_id: str
    allowed: bool


class ContextMetricsEvent(BaseModel):
    type: Literal["context.metrics"] = "context.metrics"
    snapshot: ContextMetrics


class ContextCompactionEvent(BaseModel):
    """A compaction status. On `completed` it carries the checkpoint chain so the caller can
    persist it at once (SPEC 5.5, beyond the reference design)."""

    type: Literal["context.compaction"] = "context.compaction"
    record: CompactionRecord
    checkpoint_chain: list[ChainMessage] | None = None


class TurnCompleted(BaseModel):
    type: Literal["turn.completed"] = "turn.completed"
    result: TurnResult


class TurnFailed(BaseModel):
    type: Literal["turn.failed"] = "turn.failed"
    code: str
    message: str
    partial: str = ""
    result: TurnResult


class TurnCancelled(BaseModel):
    type: Literal["turn.cancelled"] = "turn.cancelled"
    partial: str = ""
    result: TurnResult


TurnEvent = Annotated[
    TurnStarted
    | MessageDelta
    | ToolStarted
    | ToolCompleted
    | ApprovalRequested
    | ApprovalDecided
    | ContextMetricsEvent
    | ContextCompactionEvent
    | TurnCompleted
    | TurnFailed
    | TurnCancelled,
    Field(discriminator="type"),
]
TERMINAL_EVENT_TYPES = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})
