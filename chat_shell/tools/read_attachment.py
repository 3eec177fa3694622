"""`read_attachment(attachment_id, offset, limit)`: the model pages through an attachment's text.

Pages are bounded in tokens so that the whole tool output (the page plus its JSON envelope,
escaping included) stays under the tool-output budget the guard applies (`tools.pages`).
Offsets count characters (code points), so a page never splits a character and `next_offset`
is exact.

Errors (unknown id, an attachment of another conversation, no text, the per-turn call limit)
are raised as `ToolException`: the model gets a clear error message as the tool result.

`read_attachment_tool` is one tool for every conversation: the turn's `ReadAttachmentSession`
(scope, budget, calls so far) reaches it through the LangGraph run context (`TurnTools`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from langchain_core.tools import ToolException
from langgraph.prebuilt import ToolRuntime
from pydantic import BaseModel, Field

from chat_shell.accounting.text_counter import TextCounter
from chat_shell.contracts import AttachmentReader, AttachmentRef
from chat_shell.tools.built_in import built_in_tool
from chat_shell.tools.pages import (
    DEFAULT_MAX_CALLS,
    MESSAGE_OVERHEAD_TOKENS,
    TOO_SMALL,
    chars_to_fetch,
    looked_up,
    page_within,
)

if TYPE_CHECKING:  # the agent builds on the tools, not the other way round
    from chat_shell.agents.builder import AttemptRuntime


TOOL_NAME = "read_attachment"
DESCRIPTION = (
    "Read the extracted text of a file the user attached, page by page. Attachments are shown to "
    "you as previews; call this to read the parts the preview left out. `offset` is a character "
    "offset (start at 0, or at the offset a preview hint names); each result gives `next_offset` "
    "to continue from and `has_more`. `limit` caps the characters returned (0 = a full page)."
)


class ReadAttachmentArgs(BaseModel):
    attachment_id: int = Field(description="The attachment's ID, as shown in its preview header.")
    offset: int = Field(default=0, ge=0, description="Character offset to start reading at.")
    limit: int = Field(default=0, ge=0, description="At most this many characters; 0 means a full page.")


@dataclass
class ReadAttachmentSession:
    """The tool's state for one turn: scope, budget and the calls made so far."""

    conversation_id: int
    reader: AttachmentReader
    # The tool-output budget (tokens) the guard applies to this tool's messages.
    budget_tokens: int
    counter: TextCounter
    max_calls: int = DEFAULT_MAX_CALLS
    calls: int = 0

    @property
    def page_tokens(self) -> int:
        """Tokens one whole tool result may take."""
        return self.budget_tokens - MESSAGE_OVERHEAD_TOKENS


def _result(
    ref: AttachmentRef, offset: int, content: str, truncated_at_parse: bool, *, worst_case: bool = False
) -> str:
    """The tool result. With `worst_case`, every field takes its longest form (used to size the
    envelope before the page is known)."""
    total = ref.extracted_chars
    next_offset = offset + len(content)
    has_more = next_offset < total and not worst_case
    body: dict[str, Any] = {
        "status": "ok",
        "attachment_id": ref.id,
        "name": ref.filename,
        "mime_type": ref.mime_type,
        "offset": offset,
        "chars_read": total if worst_case else len(content),
        "next_offset": total if worst_case else (next_offset if has_more else None),
        "total_chars": total,
        "has_more": has_more,
        "content": content,
    }
    if truncated_at_parse and (worst_case or not has_more):
        body["warning"] = (
            f"This is the end of the extracted text, but the file was truncated at parse time after "
            f"{total:,} characters: the rest of the original file is not available as text."
        )
    return json.dumps(body, ensure_ascii=False)


async def read_attachment(
    session: ReadAttachmentSession, attachment_id: int, offset: int = 0, limit: int = 0
) -> str:
    """One page of an attachment's text as a JSON object (see `_result`)."""
    session.calls += 1
    if session.calls > session.max_calls:
        raise ToolException(
            f"{TOOL_NAME} may be called at most {session.max_calls} times per turn; "
            "answer with what you have read so far, and tell the user what is left to read."
        )
    if offset < 0 or limit < 0:
        raise ToolException("offset and limit must be zero or positive")
    ref = await looked_up(session.reader.describe(session.conversation_id, attachment_id))
    if ref.status != "ready":
        reason = ref.note or ("still being processed" if ref.status == "uploading" else "unknown reason")
        raise ToolException(f"attachment {ref.id} ({ref.filename}) has no readable text: {reason}")
    if ref.extracted_chars == 0:
        what = {"image": "an image", "binary": "a binary file", "empty": "an empty file"}.get(
            ref.kind or "", "a file without text"
        )
        raise ToolException(f"attachment {ref.id} ({ref.filename}) is {what}: there is no text to read")
    if offset > ref.extracted_chars:
        raise ToolException(
            f"offset {offset:,} is past the end of attachment {ref.id} (total_chars {ref.extracted_chars:,})"
        )
    envelope = session.counter.count(_result(ref, offset, "", ref.truncated_at_parse, worst_case=True))
    content_budget = session.page_tokens - envelope
    if content_budget <= 0:
        raise ToolException(TOO_SMALL)
    page = await looked_up(
        session.reader.read(
            session.conversation_id, attachment_id, offset, chars_to_fetch(content_budget, limit)
        )
    )
    # Fitting measures the exact result (envelope, escaping and all) for each candidate page.
    content = page_within(
        page.text,
        session.page_tokens,
        session.counter,
        lambda candidate: _result(ref, page.offset, candidate, page.truncated_at_parse),
    )
    return _result(ref, page.offset, content, page.truncated_at_parse)


async def _run_in_turn(attachment_id: int, runtime: ToolRuntime, offset: int = 0, limit: int = 0) -> str:
    # `runtime.context` is the attempt's `AttemptRuntime` (an untyped `ToolRuntime` here: its
    # annotation is read when the tool is made); its `turn_tools` hold this turn's session.
    context = cast("AttemptRuntime", runtime.context)
    return await read_attachment(context.turn_tools.read_attachment, attachment_id, offset, limit)


read_attachment_tool = built_in_tool(
    _run_in_turn, name=TOOL_NAME, description=DESCRIPTION, args_schema=ReadAttachmentArgs
)
