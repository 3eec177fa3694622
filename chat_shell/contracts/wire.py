"""What the backend sends chat_shell and what it gets back: the turn request and result, and the
requests of the between-turn calls (compaction ahead, titles, next-turn preview)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from chat_shell.contracts.history import ChainMessage
from chat_shell.contracts.metrics import CompactionRecord, ContextMetrics, ModelRequest

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
