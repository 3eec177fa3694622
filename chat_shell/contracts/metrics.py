"""Context metrics, compaction records (SPEC 5.3, 5.7) and the model requests of a turn as sent
(issue 19)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ContextState = Literal["normal", "warning", "compacting", "compacted", "refused"]
BREAKDOWN_SOURCES = (
    "system",
    # What the provider adds to every request beyond what we send (hidden prompt, tool
    # scaffolding): the configured or calibrated fixed overhead, never folded into `system`.
    "overhead",
    "tool_schemas",
    "history",
    "tool_outputs",
    "attachments",
    "summary",
    "current_input",
)


CompactionStrategy = Literal["summary_compact", "summary_ahead", "emergency_truncate", "tail_drop"]
# The strategies that summarize: inside a turn's hook, or ahead of time between turns.
SUMMARY_STRATEGIES = frozenset({"summary_compact", "summary_ahead"})
# Statuses that end a compaction; they carry its duration.
FINAL_STATUSES = frozenset({"completed", "fallback"})


class CompactionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    strategy: CompactionStrategy = "summary_compact"
    status: Literal["started", "in_progress", "completed", "fallback"]
    before_tokens: int | None = None
    after_tokens: int | None = None
    trigger: int | None = None
    keep: int | None = None
    removed_items: int | None = None
    duration_ms: float | None = None
    failure_reason: str | None = None
    created_at: datetime
    summary_text: str | None = None
    checkpoint_message_id: int | None = None
    retention_score: float | None = None
    chunks: int | None = None
    # The user-visible message (message_id) the kept tail starts at: the first one the model
    # still sees verbatim; everything above it is summarized (summary_compact only).
    first_kept_message_id: int | None = None


class ContextMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phase: str
    profile: str
    profile_source: Literal["builtin", "configured", "default"]
    context_window: int
    reserved_output: int
    available_input: int
    used_input: int
    remaining: int
    remaining_percent: float
    trigger: int
    keep: int
    over_trigger: bool
    state: ContextState
    breakdown: dict[str, int]
    estimate_source: Literal["configured", "calibrated", "reported"] = "configured"
    calibration: dict[str, Any] = Field(default_factory=dict)
    latest_compaction: CompactionRecord | None = None


# ---------------------------------------------------------------------------
# The model requests of a turn, as sent (issue 19)
# ---------------------------------------------------------------------------

RequestSource = Literal[
    # The operator's system prompt; the conversation's own instructions (sent after it, in the
    # same system message); the guidance of a retried attempt (appended to its first call).
    "system",
    "instructions",
    "guidance",
    "tool_schemas",
    "history",
    "tool_output",
    "attachment_preview",
    "summary",
    "kept_tail",
    "current_input",
]


class RequestEntry(BaseModel):
    """One part of a model request: a message as sent (after every guard stage), or a tool's
    definition. `tokens` is the message's count in the profile's units (framing included)."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool", "tool_schema"]
    source: RequestSource
    tokens: int
    # The tool's name (tool outputs, tool definitions).
    name: str | None = None
    # The MCP server a tool definition comes from (None: a built-in tool).
    server: str | None = None
    # What was sent: the content, with the assistant's tool calls as `→ name(arguments)` lines.
    text: str = ""
    # The tokens of an attachment preview at the start of a user message's text.
    preview_tokens: int | None = None
    # The chain entry the message is (None for tool definitions and attempt guidance).
    message_id: str | None = None


class ModelRequest(BaseModel):
    """One model call's request as the provider received it."""

    model_config = ConfigDict(extra="forbid")

    attempt: int
    entries: list[RequestEntry]
    # Added to every request besides its entries: the priming of the assistant's reply.
    framing_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return sum(entry.tokens for entry in self.entries) + self.framing_tokens
