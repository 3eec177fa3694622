"""`list_history` and `read_message`: the model reaches the originals its summary replaced.

Once earlier turns are summarized (the history holds a checkpoint), the model may list the
conversation's user-visible messages, paged (id, role, date, a bounded snippet), and read any
of them in pages by character offset. Both read the user-visible record (what the user typed
and what the assistant showed, tool outputs in full) of the turn's conversation only, fork
lineage included. Every result, JSON envelope and escaping included, fits the tool-output
budget the guard applies, so the guard never cuts a page and paging stays contiguous.

The tools are shared by every turn; what they act on (`HistoryToolSession`: conversation,
browser, budget, call counts) comes from the attempt's run context.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.tools import StructuredTool, ToolException
from langgraph.prebuilt import ToolRuntime
from pydantic import BaseModel, Field

from chat_shell.accounting.text_counter import TextCounter
from chat_shell.contracts import MAX_OUTLINE_ITEMS, HistoryBrowser, OriginalSummary, OriginalText
from chat_shell.tools.built_in import built_in_tool
from chat_shell.tools.pages import (
    DEFAULT_MAX_CALLS,
    MESSAGE_OVERHEAD_TOKENS,
    chars_to_fetch,
    looked_up,
    page_within,
)

LIST_NAME = "list_history"
READ_NAME = "read_message"
DEFAULT_LIST_LIMIT = 20

LIST_DESCRIPTION = (
    "List earlier messages of this conversation as the user saw them: message_id, role, date, "
    "length and the start of the text. Earlier turns are summarized in your context; use this "
    "to find an original, then read it with read_message. Results are oldest first; pass "
    "`next_before_message_id` as `before_message_id` to list further back."
)
READ_DESCRIPTION = (
    "Read one earlier message of this conversation in full, as the user saw it (an assistant "
    "message includes its tool calls and their complete outputs), page by page. `offset` is a "
    "character offset (start at 0); each result gives `next_offset` and `has_more`. `limit` caps "
    "the characters returned (0 = a full page)."
)


@dataclass
class HistoryToolSession:
    """The history tools' state for one turn."""

    conversation_id: int
    # The turn's user message: the listing starts before it.
    before_message_id: int
    browser: HistoryBrowser
    # The tool-output budget (tokens) the guard applies to a tool's messages, by tool name.
    budget_tokens: Callable[[str], int]
    counter: TextCounter
    max_calls: int = DEFAULT_MAX_CALLS
    calls: Counter[str] = field(default_factory=Counter)

    def page_tokens(self, tool: str) -> int:
        """Tokens one whole result of `tool` may take."""
        return self.budget_tokens(tool) - MESSAGE_OVERHEAD_TOKENS

    def charge(self, tool: str) -> None:
        self.calls[tool] += 1
        if self.calls[tool] > self.max_calls:
            raise ToolException(
                f"{tool} may be called at most {self.max_calls} times per turn; answer with what you "
                "have found so far."
            )


def _date(summary: OriginalSummary | OriginalText) -> str:
    return summary.created_at.strftime("%Y-%m-%d %H:%M UTC")


def _item(summary: OriginalSummary) -> dict[str, Any]:
    item: dict[str, Any] = {"message_id": summary.message_id, "role": summary.role, "date": _date(summary)}
    if summary.status != "completed":
        item["status"] = summary.status
    item.update(chars=summary.chars, summarized=summary.summarized, snippet=summary.snippet)
    return item


def _listing(items: list[dict[str, Any]], next_before: int | None) -> str:
    body = {
        "status": "ok",
        "messages": items,
        "has_more": next_before is not None,
        "next_before_message_id": next_before,
    }
    return json.dumps(body, ensure_ascii=False)


async def list_history(
    session: HistoryToolSession, before_message_id: int | None = None, limit: int = DEFAULT_LIST_LIMIT
) -> str:
    """Up to `limit` messages before `before_message_id` (default: the current turn), oldest first."""
    session.charge(LIST_NAME)
    before = session.before_message_id
    if before_message_id is not None:
        before = max(1, min(before_message_id, before))
    limit = max(1, min(limit, MAX_OUTLINE_ITEMS))
    page = await looked_up(session.browser.outline(session.conversation_id, before, limit))
    items = [_item(summary) for summary in page.items]
    next_before = page.next_before_message_id
    budget = session.page_tokens(LIST_NAME)
    result = _listing(items, next_before)
    # Oldest first, so when the page does not fit, the oldest items wait for the next page.
    while session.counter.count(result) > budget:
        if len(items) <= 1:
            raise ToolException("the tool-output budget is too small to list any message")
        items = items[1:]
        next_before = items[0]["message_id"]
        result = _listing(items, next_before)
    return result


def _read_result(page: OriginalText, content: str) -> str:
    next_offset = page.offset + len(content)
    has_more = next_offset < page.total_chars
    body = {
        "status": "ok",
        "message_id": page.message_id,
        "role": page.role,
        "date": _date(page),
        "offset": page.offset,
        "chars_read": len(content),
        "next_offset": next_offset if has_more else None,
        "total_chars": page.total_chars,
        "has_more": has_more,
        "content": content,
    }
    if page.status != "completed":
        body["message_status"] = page.status
    return json.dumps(body, ensure_ascii=False)


async def read_message(session: HistoryToolSession, message_id: int, offset: int = 0, limit: int = 0) -> str:
    """One page of a message's readable text as a JSON object (see `_read_result`)."""
    session.charge(READ_NAME)
    if offset < 0 or limit < 0:
        raise ToolException("offset and limit must be zero or positive")
    budget = session.page_tokens(READ_NAME)
    page = await looked_up(
        session.browser.read(session.conversation_id, message_id, offset, chars_to_fetch(budget, limit))
    )
    if offset > page.total_chars:
        raise ToolException(
            f"offset {offset:,} is past the end of message {message_id} (total_chars {page.total_chars:,})"
        )
    # Fitting measures the exact result (envelope, escaping and all) for each candidate page.
    content = page_within(page.text, budget, session.counter, lambda text: _read_result(page, text))
    return _read_result(page, content)


class _TurnTools(Protocol):
    history: HistoryToolSession | None


class _RunContext(Protocol):
    turn_tools: _TurnTools


def _session(runtime: ToolRuntime[_RunContext]) -> HistoryToolSession:
    session = runtime.context.turn_tools.history if runtime.context is not None else None
    if session is None:
        raise ToolException("the conversation history cannot be read in this turn")
    return session


class ListHistoryArgs(BaseModel):
    before_message_id: int | None = Field(
        default=None, ge=1, description="List messages before this message_id (default: before this turn)."
    )
    limit: int = Field(
        default=DEFAULT_LIST_LIMIT, ge=1, le=MAX_OUTLINE_ITEMS, description="How many messages to list."
    )


class ReadMessageArgs(BaseModel):
    message_id: int = Field(ge=1, description="The message_id, as list_history shows it.")
    offset: int = Field(default=0, ge=0, description="Character offset to start reading at.")
    limit: int = Field(default=0, ge=0, description="At most this many characters; 0 means a full page.")


def list_history_tool() -> StructuredTool:
    async def run(
        runtime: ToolRuntime[_RunContext],
        before_message_id: int | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
    ) -> str:
        return await list_history(_session(runtime), before_message_id, limit)

    return built_in_tool(run, name=LIST_NAME, description=LIST_DESCRIPTION, args_schema=ListHistoryArgs)


def read_message_tool() -> StructuredTool:
    async def run(runtime: ToolRuntime[_RunContext], message_id: int, offset: int = 0, limit: int = 0) -> str:
        return await read_message(_session(runtime), message_id, offset, limit)

    return built_in_tool(run, name=READ_NAME, description=READ_DESCRIPTION, args_schema=ReadMessageArgs)
