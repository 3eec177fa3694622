"""The model requests of a turn, stored compactly, and the one its owner is shown (issue 19).

Stored on the turn row (`turns.model_requests`) when the turn finishes: every model call of the
turn, entry by entry (role, source, tokens), each distinct text once under its hash, since the
calls of a turn repeat each other's history. The operator's global system prompt (source
`system`; the conversation's instructions are their own entry) is stored by hash only: operators
see its text (from the settings, when the hash still matches), users see its size. Retention:
the conversation's latest finished turn keeps its requests; a turn that finishes clears those of
the conversation's earlier turns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Conversation, Turn, TurnStatus
from backend.schemas.model_requests import ModelRequestView, ShownEntry
from backend.services.records.history import request_basis
from chat_shell.contracts import ModelRequest, NextTurnPreviewer, NextTurnQuery

FORMAT_VERSION = 1
NO_MODEL_CALL = "The latest turn ended before the model was called, so no request was sent."
NO_PREVIEW = "The next turn's request can be shown only when chat_shell runs inside the backend."


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def compact(requests: Sequence[ModelRequest]) -> dict[str, Any] | None:
    """The stored form of a turn's requests (None when the model was never called)."""
    if not requests:
        return None
    texts: dict[str, str] = {}
    calls = []
    for request in requests:
        entries = []
        for entry in request.entries:
            digest = text_hash(entry.text)
            if entry.source != "system":
                texts.setdefault(digest, entry.text)
            entries.append({**entry.model_dump(exclude={"text"}, exclude_none=True), "hash": digest})
        framing = request.framing_tokens
        calls.append({"attempt": request.attempt, "framing_tokens": framing, "entries": entries})
    return {"version": FORMAT_VERSION, "texts": texts, "calls": calls}


async def store(db: AsyncSession, turn: Turn, requests: Sequence[ModelRequest]) -> None:
    """Keeps `turn`'s requests and clears those of the conversation's earlier turns."""
    turn.model_requests = compact(requests)
    await db.execute(
        update(Turn)
        .where(
            Turn.conversation_id == turn.conversation_id,
            Turn.id != turn.id,
            Turn.model_requests.is_not(None),
        )
        .values(model_requests=None)
    )


def _shown(entry: dict[str, Any], texts: dict[str, str], operator_prompt: str | None) -> ShownEntry:
    digest = entry["hash"]
    fields = {key: value for key, value in entry.items() if key != "hash"}
    if entry["source"] == "system":
        visible = operator_prompt is not None and text_hash(operator_prompt) == digest
        return ShownEntry(**fields, text=operator_prompt if visible else None, text_hidden=not visible)
    return ShownEntry(**fields, text=texts.get(digest, ""))


async def latest_request(
    db: AsyncSession, conversation: Conversation, *, operator_prompt: str | None
) -> ModelRequestView:
    """The last model request of the conversation's latest finished turn. `operator_prompt` is
    the global system prompt when the reader is an operator (None: users see its size only)."""
    turn = await db.scalar(
        select(Turn)
        .where(Turn.conversation_id == conversation.id, Turn.status != TurnStatus.RUNNING)
        .order_by(Turn.id.desc())
        .limit(1)
    )
    if turn is None:
        return ModelRequestView(conversation_id=conversation.id, state="no_turns")
    document = turn.model_requests or {}
    calls = document.get("calls") or []
    if not calls:
        reason = turn.error_message or turn.termination_reason or turn.status
        return ModelRequestView(
            conversation_id=conversation.id,
            turn_id=turn.id,
            turn_status=turn.status,
            state="no_model_call",
            note=f"{NO_MODEL_CALL} ({reason})",
        )
    return _view(conversation, document, operator_prompt, state="sent", turn=turn)


async def next_request(
    db: AsyncSession,
    conversation: Conversation,
    previewer: NextTurnPreviewer | None,
    *,
    model: str,
    system_prompt: str | None,
    operator_prompt: str | None,
) -> ModelRequestView:
    """The request the conversation's next turn would send before the user's message (the
    guard's stages run, no model called), shown like a sent one."""
    if previewer is None:
        return ModelRequestView(conversation_id=conversation.id, state="unavailable", note=NO_PREVIEW)
    basis = await request_basis(db, conversation, model=model, system_prompt=system_prompt)
    preview = await previewer.preview_next(NextTurnQuery(**basis, mcp_servers=conversation.mcp_servers))
    if preview is None:
        return ModelRequestView(conversation_id=conversation.id, state="unavailable", note=NO_PREVIEW)
    document = compact([preview.request])
    assert document is not None
    view = _view(conversation, document, operator_prompt, state="next")
    return view.model_copy(update={"summary_due": preview.summary_due})


def _view(
    conversation: Conversation,
    document: dict[str, Any],
    operator_prompt: str | None,
    *,
    state: Literal["sent", "next"],
    turn: Turn | None = None,
) -> ModelRequestView:
    """The last call of a stored (compact) document, entry by entry."""
    calls = document["calls"]
    last = calls[-1]
    texts = document.get("texts") or {}
    entries = [_shown(entry, texts, operator_prompt) for entry in last["entries"]]
    return ModelRequestView(
        conversation_id=conversation.id,
        turn_id=turn.id if turn is not None else None,
        turn_status=turn.status if turn is not None else None,
        state=state,
        calls=len(calls),
        attempt=last["attempt"],
        entries=entries,
        framing_tokens=last["framing_tokens"],
        total_tokens=sum(entry.tokens for entry in entries) + last["framing_tokens"],
    )
