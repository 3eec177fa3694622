"""The data contracts between `chat_shell` and its caller (the backend), in both placements.

Package mode passes these objects in-process; service mode sends the same models as JSON
(`POST /v1/response` body, SSE event data). Nothing outside these models crosses the boundary.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

# ---------------------------------------------------------------------------
# Model-visible history (SPEC 2): the `messages_chain` entries and the history view.
# ---------------------------------------------------------------------------


class TokenCount(BaseModel):
    """A cached token count of one message, valid while encoding and content hash match."""

    model_config = ConfigDict(extra="forbid")

    encoding: str
    content_hash: str
    tokens: int


class ChainMetadata(BaseModel):
    """The whitelist of markers that travel with a chain entry, over HTTP as well as in-process.

    Code recognizes summaries, retained clones and compact tool outputs by these fields only,
    never by message text.
    """

    model_config = ConfigDict(extra="forbid")

    summary_compacted: bool | None = None
    summary_version: int | None = None
    checkpoint_retained: bool | None = None
    compacted: bool | None = None
    token_count: TokenCount | None = None
    # Calibration sample of the request that produced this assistant message (SPEC 4).
    local_input_tokens: int | None = None
    provider_input_tokens: int | None = None
    profile: str | None = None
    # Where a history entry came from in the user-visible record (message_id in its conversation).
    source_conversation_id: int | None = None
    source_message_id: int | None = None
    source_status: str | None = None
    attachment_ids: list[int] | None = None
    # The content already carries the rendered preview of `attachment_ids` (SPEC 5.2.2), so a
    # reloaded message is never previewed twice; the preview is the first
    # `attachment_preview_chars` characters (of the first text part, for list content), so it can
    # be replaced (stricter policy, deleted attachment) without touching what the user wrote.
    attachment_preview: bool | None = None
    attachment_preview_chars: int | None = None
    # How many image parts of the preview follow its text part (models that accept images): the
    # preview's pictures, swapped in every turn, never part of what the user wrote.
    attachment_preview_images: int | None = None


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ChainMessage(BaseModel):
    """One LangChain-style message dict of the model-visible history."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] = ""
    id: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    metadata: ChainMetadata = Field(default_factory=ChainMetadata)


# ---------------------------------------------------------------------------
# Turn request
# ---------------------------------------------------------------------------


AttachmentKind = Literal[
    "empty",
    "text",
    "code",
    "markdown",
    "log",
    "table",
    "json",
    "html",
    "pdf",
    "docx",
    "xlsx",
    "image",
    "binary",
]


class AttachmentRef(BaseModel):
    """What chat_shell knows about an attachment without reading its text."""

    model_config = ConfigDict(extra="forbid")

    id: int
    filename: str
    mime_type: str
    size_bytes: int
    status: Literal["uploading", "ready", "failed"]
    # What the content is (detected from the bytes); drives type-aware preview hints.
    kind: AttachmentKind | None = None
    extracted_chars: int = 0
    truncated_at_parse: bool = False
    pages: int | None = None  # PDFs
    rows: int | None = None  # CSV/TSV and spreadsheets
    note: str | None = None  # e.g. why extraction failed, or that the text was truncated


class UserInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message_id: int
    content: str
    attachments: list[AttachmentRef] = Field(default_factory=list)


class BackendAccess(BaseModel):
    """How a chat_shell service reaches the backend for one turn (service mode, SPEC 6.4).

    `capability` is a short-lived token the backend minted for this turn: it reads the
    conversation's model history, its user-visible messages and its attachments' text, and
    nothing else. The backend sends its own base URL, so the service needs no backend address.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str
    capability: str


class TurnRequest(BaseModel):
    """Everything one turn needs. `history` is the resolved model-visible history (SPEC 6.2);
    when it is None, chat_shell loads it itself through its history loader (service mode, with
    `backend` access)."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: int
    owner_id: int
    turn_id: int
    assistant_message_id: int
    user: UserInput
    history: list[ChainMessage] | None = None
    backend: BackendAccess | None = None
    model: str | None = None
    system_prompt: str | None = None
    # The MCP servers the conversation enabled, by name; None: the deployment's default set.
    mcp_servers: list[str] | None = None
    # The conversation's own instructions: sent after the system prompt, in the same system
    # message, and counted with it under "system".
    instructions: str | None = None
    # MCP servers and tools (`<server>_<tool>`) marked "ask first": a call of one waits for the
    # user's decision (`TurnRuntime.decide`) before it runs.
    ask_first: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------
# Context metrics and compaction records (SPEC 5.3, 5.7)
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# Turn result and events
# ---------------------------------------------------------------------------


class TextBlock(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"] = "text"
    text: str


class ToolBlock(BaseModel):
    """A tool call as the user saw it: full raw output, never the compact model form."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["tool"] = "tool"
    call_id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    output: str | None = None
    status: Literal["running", "completed", "error"] = "running"
    truncated_for_model: bool = False
    # An "ask first" call: waiting for the user's decision, or what the user decided.
    approval: Literal["pending", "allowed", "denied"] | None = None


Block = Annotated[TextBlock | ToolBlock, Field(discriminator="type")]


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    provider_reported: bool = True


TerminationReason = Literal[
    "normal_completion",
    "completed_with_unexecuted_tool_calls",
    "tool_limit_recovery",
    "truncation_retry_exhausted",
    "context_refused",
    "provider_error",
    "cancelled",
    # Stopped by its host at the per-turn wall-clock limit (what it wrote so far is kept).
    "time_limit",
    # A failure of chat_shell itself or of its host (history, service connection), not the model's.
    "internal_error",
]


class TurnResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: str = ""
    blocks: list[Block] = Field(default_factory=list)
    messages_chain: list[ChainMessage] = Field(default_factory=list)
    context_metrics: ContextMetrics | None = None
    context_compactions: list[CompactionRecord] = Field(default_factory=list)
    termination_reason: TerminationReason
    usage: Usage = Field(default_factory=Usage)
    ttft_ms: float | None = None
    overflow_errors: int = 0
    # Graph runs of the turn (the first attempt and every retry); 0 when none started.
    attempts: int = 0
    # Every model call's request, in order (empty: the turn ended before calling the model).
    requests: list[ModelRequest] = Field(default_factory=list)


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


# ---------------------------------------------------------------------------
# What chat_shell asks of its host
# ---------------------------------------------------------------------------


# The most characters one HTTP text read returns (attachment text, a message's text); readers
# that need more ask again from `next_offset`.
MAX_TEXT_PAGE_CHARS = 1_000_000
# The most messages one `list_history` page (and the outline endpoint) returns.
MAX_OUTLINE_ITEMS = 50


class AttachmentPage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attachment_id: int
    offset: int
    text: str
    next_offset: int
    total_chars: int
    has_more: bool
    truncated_at_parse: bool = False


# The image attachments a model that accepts images is shown: the types every such provider
# takes, up to a size they all accept (larger ones are described, as for other models).
MODEL_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MAX_MODEL_IMAGE_BYTES = 5 * 1024 * 1024
# The content parts that carry a picture (OpenAI's, LangChain's standard and the Responses API's).
IMAGE_PART_TYPES = frozenset({"image_url", "image", "input_image"})


def shows_as_image(ref: AttachmentRef) -> bool:
    """Whether a model that accepts images is shown `ref` as a picture."""
    return (
        ref.status == "ready"
        and ref.kind == "image"
        and ref.mime_type in MODEL_IMAGE_TYPES
        and 0 < ref.size_bytes <= MAX_MODEL_IMAGE_BYTES
    )


class AttachmentImage(BaseModel):
    """An image attachment's bytes, for a model that accepts images (base64, as providers take it)."""

    model_config = ConfigDict(extra="forbid")

    attachment_id: int
    mime_type: str
    data_base64: str


class ModelHistory(BaseModel):
    """The model-visible history of a conversation (SPEC 6.2), as the history endpoint sends it."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: int
    # The assistant message whose checkpoint chain opens `messages` (None: no checkpoint used).
    checkpoint_message_id: int | None = None
    messages: list[ChainMessage]


class OriginalMessage(BaseModel):
    """Which message of the user-visible record an answer is about."""

    model_config = ConfigDict(extra="forbid")

    message_id: int
    role: Literal["user", "assistant"]
    status: str
    created_at: datetime


class OriginalSummary(OriginalMessage):
    """One message of the user-visible record, as `list_history` shows it."""

    # Characters of the message's readable text (what `read_message` pages through).
    chars: int
    # The start of that text, whitespace collapsed, bounded.
    snippet: str
    # At or before the latest compaction checkpoint: the model sees it only through the summary
    # (or as a retained copy).
    summarized: bool


class OriginalsPage(BaseModel):
    """Messages before a point of the user-visible record, oldest first."""

    model_config = ConfigDict(extra="forbid")

    items: list[OriginalSummary]
    # Pass as `before_message_id` to continue further back; None when nothing older exists.
    next_before_message_id: int | None = None


class OriginalText(OriginalMessage):
    """A page of one user-visible message's readable text, by character offset (code points)."""

    offset: int
    text: str
    next_offset: int
    total_chars: int
    has_more: bool


class McpToolInfo(BaseModel):
    name: str
    description: str = ""


class McpServerInfo(BaseModel):
    """A configured MCP server as the tools panel shows it."""

    name: str
    transport: Literal["streamable_http", "stdio"]
    status: Literal["connecting", "available", "unavailable"]
    # In the deployment's default set (conversations that have not chosen use these).
    enabled_by_default: bool
    tools: list[McpToolInfo] = Field(default_factory=list)
    # Why the server is unavailable (the last connection error).
    error: str | None = None


class AheadRequest(BaseModel):
    """A finished turn whose conversation may be compacted ahead of time, before the next send."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: int
    owner_id: int
    turn_id: int
    # The finished turn's assistant message: the checkpoint is stored on it (SPEC 5.5).
    assistant_message_id: int
    # The model-visible history the next turn would start from, that message's entries included.
    history: list[ChainMessage]
    # Ids of the entries that message itself contributes: kept as they are, not cloned.
    own_ids: list[str] = Field(default_factory=list)
    model: str | None = None
    system_prompt: str | None = None
    # The conversation's own instructions, as the next turn will send them.
    instructions: str | None = None


class TitleRequest(BaseModel):
    """A conversation's first exchange, to be named by a short generated title (issue 22)."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: int
    # The conversation's model: its summarizer (or the model itself) writes the title.
    model: str | None = None
    user_text: str
    # The names of the files the user's message carries: a first message may be files alone.
    file_names: list[str] = Field(default_factory=list)
    reply_text: str


class NextTurnQuery(BaseModel):
    """What the next turn of a conversation would start from, so its request can be shown
    before the user sends (issue 19): the history, prompts and MCP servers that turn gets."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: int
    owner_id: int
    history: list[ChainMessage]
    model: str | None = None
    system_prompt: str | None = None
    instructions: str | None = None
    mcp_servers: list[str] | None = None


class NextTurnRequest(BaseModel):
    """The request the next turn's first model call would send before its user message."""

    request: ModelRequest
    # The history alone reaches the trigger: the next turn summarizes it before the model call,
    # so what it sends will be shorter than `request`.
    summary_due: bool


class NextTurnPreviewer(Protocol):
    """A runtime that can show the next turn's request without running it (in-process chat_shell)."""

    async def preview_next(self, query: NextTurnQuery) -> NextTurnRequest | None:
        """The guard's stages over the next turn's start, without calling any model; None when
        this runtime cannot tell (a service-mode host reads history per turn)."""
        ...


# Where a compaction made ahead of time reports its statuses (`started`, `in_progress`, ...).
CompactionStatusSink = Callable[["ContextCompactionEvent"], None]


class AheadCompactor(Protocol):
    """A runtime that can compact a conversation between turns (in-process chat_shell)."""

    async def compact_ahead(
        self, request: AheadRequest, on_status: CompactionStatusSink
    ) -> ContextCompactionEvent | None:
        """The final status (`completed` with its checkpoint chain, or `fallback`), or None
        when the next request is below the pre-trigger and nothing was done."""
        ...


class TurnRuntime(Protocol):
    """What the backend runs a turn with: chat_shell in-process, or a client of the service.

    Yields `turn.started` first and exactly one terminal event last; setting `cancel` stops the
    turn, which then ends with `turn.cancelled` carrying the partial output.
    """

    def run(
        self, request: TurnRequest, cancel: asyncio.Event | None = None
    ) -> AsyncGenerator[TurnEvent, None]: ...

    async def mcp_servers(self) -> list[McpServerInfo]:
        """The configured MCP servers, their state and their tools."""
        ...

    async def decide(self, turn_id: int, call_id: str, allow: bool) -> bool:
        """The user's decision on an "ask first" call of a running turn; False when that call
        is not waiting for one (never asked, or decided already)."""
        ...

    async def write_title(self, request: TitleRequest) -> str | None:
        """A short title for a conversation's first exchange, cleaned (one line, no Markdown, at
        most `chat_shell.titles.MAX_TITLE_CHARS`); None when the model gave none or failed."""
        ...


class HistoryLoader(Protocol):
    """Loads the model-visible history of a conversation (SPEC 6.2), newest checkpoint first."""

    async def load(self, conversation_id: int, before_message_id: int) -> list[ChainMessage]: ...


class HistoryBrowser(Protocol):
    """Reads a conversation's user-visible record for the `list_history` and `read_message` tools.

    Scoped to one conversation (its fork lineage included); an unknown message raises `LookupError`.
    """

    async def outline(
        self, conversation_id: int, before_message_id: int | None, limit: int
    ) -> OriginalsPage: ...

    async def read(
        self, conversation_id: int, message_id: int, offset: int, limit_chars: int
    ) -> OriginalText: ...


class AttachmentReader(Protocol):
    """Reads extracted attachment text for the preview stage and the `read_attachment` tool.

    Implementations enforce ownership: an id the conversation's owner cannot see raises
    `LookupError`.
    """

    async def describe(self, conversation_id: int, attachment_id: int) -> AttachmentRef: ...

    async def read(
        self, conversation_id: int, attachment_id: int, offset: int, limit_chars: int
    ) -> AttachmentPage: ...

    async def tail(self, conversation_id: int, attachment_id: int, chars: int) -> str: ...

    async def image(self, conversation_id: int, attachment_id: int) -> AttachmentImage:
        """The bytes of an image attachment a model may be shown (`LookupError` when it may not:
        not an image of a type providers take, too large, deleted)."""
        ...
