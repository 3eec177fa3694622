"""Conversation exports: the user-visible transcript (SPEC 2) as JSON or Markdown.

Exports read the same view as the page (`messages.transcript`, the fork lineage included) and
never the model-visible `messages_chain`. Markdown is rendered from the JSON document, so both
formats always say the same thing.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any
from urllib.parse import quote

from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Conversation
from backend.models.base import utcnow
from backend.schemas.conversations import ConversationExport, ConversationOut
from backend.services.conversations import messages
from chat_shell.contracts import SUMMARY_STRATEGIES
from chat_shell.sizes import byte_size

_STATUS_NOTES = {
    "cancelled": "Stopped by the user; the reply above is what was written before the stop.",
    "interrupted": "Interrupted; the reply above is what was written before the service stopped.",
    "running": "Still being written when this export was made.",
    "pending": "Not started yet when this export was made.",
}
_SPEAKERS = {"user": "You", "assistant": "Assistant"}


async def document(db: AsyncSession, conversation: Conversation) -> ConversationExport:
    return ConversationExport(
        conversation=ConversationOut.of(conversation),
        messages=await messages.transcript(db, conversation),
        exported_at=utcnow(),
    )


def rendered(document: ConversationExport, fmt: str) -> tuple[str, str]:
    """The export's body and media type: JSON, or Markdown rendered from the same document."""
    if fmt == "json":
        return document.model_dump_json(indent=2), "application/json"
    return render_markdown(document.model_dump(mode="json")), "text/markdown; charset=utf-8"


def download_name(title: str, extension: str) -> str:
    """A Content-Disposition value: an ASCII fallback name plus the UTF-8 title."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", ascii_title).strip("-._")[:80] or "conversation"
    utf8 = quote(f"{title[:80]}.{extension}", safe="")
    return f"attachment; filename=\"{stem}.{extension}\"; filename*=UTF-8''{utf8}"


def _fence(text: str, language: str = "") -> str:
    """A fenced block that the text itself cannot close (longer than any backtick run in it)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{text}\n{ticks}"


def _attachments(files: list[dict[str, Any]]) -> str:
    names = []
    for item in files:
        state = "deleted" if item.get("deleted") else item["status"]
        names.append(f"`{item['filename']}` ({byte_size(item['size_bytes'])}, {state})")
    return "Attachments: " + ", ".join(names)


def _tool(block: dict[str, Any]) -> str:
    status = block.get("status", "completed")
    if block.get("approval"):  # an "ask first" call: what the user decided
        status += (
            f", {block['approval']} by the user" if block["approval"] != "pending" else ", awaiting the user"
        )
    parts = [
        f"<details><summary>Tool call: {block['name']} ({status})</summary>",
        "",
        "Arguments:",
        "",
        _fence(json.dumps(block.get("args") or {}, indent=2, ensure_ascii=False), "json"),
    ]
    if block.get("output") is not None:
        parts += ["", "Output:", "", _fence(block["output"])]
    parts += ["", "</details>"]
    return "\n".join(parts)


def _compactions(result: dict[str, Any]) -> list[str]:
    notes = []
    for record in result.get("context_compactions") or []:
        if record.get("status") != "completed":
            continue
        if record.get("strategy", "summary_compact") in SUMMARY_STRATEGIES:
            note = "*Earlier messages were summarized for the model here; they are all still shown above.*"
            summary = record.get("summary_text")
            if summary:
                note += "\n\n<details><summary>Summary</summary>\n\n" + _fence(summary) + "\n\n</details>"
        else:
            note = "*Earlier messages were trimmed from the model's context here.*"
        notes.append(note)
    return notes


def _message(message: dict[str, Any]) -> str:
    speaker = _SPEAKERS.get(message["role"], message["role"].title())
    parts = [f"## {speaker} · {str(message['created_at'])[:16].replace('T', ' ')} UTC"]
    result = message.get("result") or {}
    parts += _compactions(result)
    if message["role"] == "user":
        if message["content"]:
            parts.append(message["content"])
    else:
        for block in result.get("blocks") or []:
            if block.get("type") == "tool":
                parts.append(_tool(block))
            elif block.get("text"):
                parts.append(block["text"])
        if not result.get("blocks") and result.get("value"):
            parts.append(result["value"])
    if message.get("attachments"):
        parts.append(_attachments(message["attachments"]))
    error = result.get("error")
    note = _STATUS_NOTES.get(message["status"])
    if message["status"] == "failed" and error:
        note = f"The reply failed ({error.get('code')}): {error.get('message')}"
    if note:
        parts.append(f"> {note}")
    return "\n\n".join(parts)


def render_markdown(document: dict[str, Any]) -> str:
    """The transcript as Markdown, from the JSON export document."""
    conversation = document["conversation"]
    header = [
        f"# {conversation['title']}",
        f"Exported from Chat Shell on {str(document['exported_at'])[:16].replace('T', ' ')} UTC; "
        f"{len(document['messages'])} messages.",
    ]
    forked = conversation.get("forked_from")
    if forked:
        header.append(
            f"Forked from conversation {forked['conversation_id']} at message {forked['message_id']}."
        )
    body = [_message(message) for message in document["messages"]]
    return "\n\n".join(header) + "\n\n---\n\n" + "\n\n---\n\n".join(body) + "\n"
