"""The interfaces on either side of the boundary: the runtime the backend drives, and the
readers chat_shell calls back into its host."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Protocol

from chat_shell.contracts.events import ContextCompactionEvent, TurnEvent
from chat_shell.contracts.history import ChainMessage
from chat_shell.contracts.host import AttachmentImage, AttachmentPage, OriginalsPage, OriginalText
from chat_shell.contracts.wire import (
    AheadRequest,
    AttachmentRef,
    McpServerInfo,
    NextTurnQuery,
    NextTurnRequest,
    TitleRequest,
    TurnRequest,
)


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
