"""Model-visible history resolution (SPEC 6.2): the one pipeline behind every history read.

The user-visible record (rows of `messages`) is never rewritten. The model-visible history is
rebuilt from it: user rows become user messages, assistant rows contribute their stored
`messages_chain`, and with `from_latest_compaction` the newest checkpoint chain replaces
everything before it. History follows one path of the conversation's message tree
(`branches`): walking up from the message, the first checkpoint met ends the walk, so the cost
depends on the turns after the checkpoint only, never on the conversation's length or on
other versions.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Attachment, Conversation, Message, MessageStatus, Role
from backend.services.conversations import branches
from chat_shell.accounting.text_counter import text_counter_for
from chat_shell.contracts import ChainMessage, ChainMetadata, ContextMetrics
from chat_shell.messages.convert import entry_id
from chat_shell.runtime import RuntimeConfig

# Assistant messages looked at (newest first) for the latest stored metrics snapshot.
METRICS_LOOKBACK = 10
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResolvedHistory:
    messages: list[ChainMessage]
    # The assistant message whose checkpoint chain opens `messages`, if one does.
    checkpoint_message_id: int | None = None


async def path_checkpoint_id(db: AsyncSession, conversation: Conversation) -> int | None:
    """The `message_id` of the newest checkpoint on the current path, if one is."""
    path = await branches.steps(db, conversation.current_leaf_pk, to_checkpoint=True)
    return path[-1].message_id if path and path[-1].has_checkpoint else None


def stored_chain(message: Message) -> list[ChainMessage]:
    entries = (message.result or {}).get("messages_chain") or []
    return [ChainMessage.model_validate(entry) for entry in entries]


def checkpoint_slice(chain: list[ChainMessage]) -> list[ChainMessage]:
    """The self-contained checkpoint: from the newest summary message to the end of the chain.

    A later summary folds the earlier ones in, so everything before it is superseded."""
    for index in range(len(chain) - 1, -1, -1):
        if chain[index].metadata.summary_compacted:
            return chain[index:]
    return chain


def _source(message: Message, **extra: Any) -> ChainMetadata:
    return ChainMetadata(
        source_conversation_id=message.conversation_id,
        source_message_id=message.message_id,
        source_status=message.status,
        **extra,
    )


def unsaved_text(result: dict[str, Any], chain: Sequence[ChainMessage]) -> str:
    """The text a failed, cancelled or interrupted turn showed that its chain does not hold.

    The chain keeps the model replies that finished; a reply cut off mid-stream exists only as
    visible text. The turn's text is its text blocks concatenated (the one fold of its events),
    and the blocks after the last one a chain reply holds are that part. A block after a tool
    opens with the paragraph break the stream showed, which the model's reply does not hold:
    blocks and replies are compared, and the part returned, without surrounding white space.
    """
    blocks = result.get("blocks") or []
    if blocks:
        texts = [b["text"] for b in blocks if b.get("type") == "text" and b.get("text")]
    else:
        texts = [str(result["value"])] if result.get("value") else []
    held = {
        e.content.strip() for e in chain if e.role == "assistant" and isinstance(e.content, str) and e.content
    }
    last_held = max((index for index, text in enumerate(texts) if text.strip() in held), default=-1)
    return "".join(texts[last_held + 1 :]).strip()


def turn_entries(message: Message) -> list[ChainMessage]:
    """What one assistant row contributes: its chain, plus the unsaved visible text of a turn
    that did not complete (the partial output the user saw)."""
    chain = stored_chain(message)
    result = message.result or {}
    if message.status == MessageStatus.COMPLETED:
        text = "" if chain else str(result.get("value") or "")
    else:
        text = unsaved_text(result, chain)
    if text:
        chain.append(
            ChainMessage(
                role="assistant",
                content=text,
                id=entry_id("assistant", message.conversation_id, message.message_id),
                metadata=_source(message),
            )
        )
    return chain


def expand(message: Message, attachment_ids: Sequence[int]) -> list[ChainMessage]:
    """The model-visible messages one user-visible row contributes after the opening checkpoint.

    Summaries and retained clones belong to a checkpoint only where it opens the history; an
    older checkpoint row (history read without `from_latest_compaction`) contributes the
    messages its turn produced and nothing that repeats earlier rows.
    """
    if message.role == Role.USER:
        return [
            ChainMessage(
                role="user",
                content=message.content,
                id=entry_id("user", message.conversation_id, message.message_id),
                metadata=_source(message, attachment_ids=list(attachment_ids) or None),
            )
        ]
    return [
        entry
        for entry in turn_entries(message)
        if not (entry.metadata.summary_compacted or entry.metadata.checkpoint_retained)
    ]


async def _attachment_ids(db: AsyncSession, rows: Sequence[Message]) -> dict[int, list[int]]:
    """The files each user row was sent with (an edited question: those of the one it edits)."""
    files_pks = {row.files_pk for row in rows if row.role == Role.USER}
    if not files_pks:
        return {}
    grouped: dict[int | None, list[int]] = {}
    found = await db.execute(
        select(Attachment.message_pk, Attachment.id)
        .where(Attachment.message_pk.in_(files_pks))
        .order_by(Attachment.id)
    )
    for message_pk, attachment_id in found:
        grouped.setdefault(message_pk, []).append(attachment_id)
    return {row.id: grouped.get(row.files_pk, []) for row in rows if row.role == Role.USER}


async def resolve_history(
    db: AsyncSession,
    conversation: Conversation,
    *,
    before_message_id: int | None = None,
    through_pk: int | None = None,
    limit: int | None = None,
    from_latest_compaction: bool = True,
) -> ResolvedHistory:
    """The model-visible history of the path that leads to a message (fork ancestors included).

    The path is that of `before_message_id` (its ancestors, whichever version is shown), or the
    one ending with message `through_pk` (its key), else the conversation's current path. With
    `from_latest_compaction`, the newest checkpoint chain ON THAT PATH (an assistant message of
    any status) opens the history and only later rows are read, so a checkpoint made on another
    version never applies; `limit` counts rows after the checkpoint and never cuts the
    checkpoint chain. `limit <= 0` means no history.
    """
    if limit is not None and limit <= 0:
        return ResolvedHistory([])
    if through_pk is not None:
        start: int | None = through_pk
    else:
        start = await branches.start_before(db, conversation, before_message_id)
    path = await branches.steps(db, start, to_checkpoint=from_latest_compaction)
    opening = path.pop() if from_latest_compaction and path and path[-1].has_checkpoint else None
    if limit is not None:
        path = path[:limit]
    rows = list(reversed(await branches.load(db, path)))
    attachments = await _attachment_ids(db, rows)
    checkpoint = (await branches.load(db, [opening]))[0] if opening is not None else None
    history = checkpoint_slice(turn_entries(checkpoint)) if checkpoint is not None else []
    for row in rows:
        history.extend(expand(row, attachments.get(row.id, [])))
    return ResolvedHistory(history, checkpoint.message_id if checkpoint is not None else None)


class RequestBasis(TypedDict):
    """What every runtime request built from a conversation starts from: a turn's
    (`TurnRequest`), the compaction ahead of time's (`AheadRequest`) and the next turn's
    preview (`NextTurnQuery`) each add their own fields to it."""

    conversation_id: int
    owner_id: int
    # None: chat_shell runs as its own service and loads the history itself.
    history: list[ChainMessage] | None
    model: str
    system_prompt: str | None
    instructions: str | None


async def request_basis(
    db: AsyncSession,
    conversation: Conversation,
    *,
    model: str,
    system_prompt: str | None,
    before_message_id: int | None = None,
    through_pk: int | None = None,
    with_history: bool = True,
) -> RequestBasis:
    """The conversation's part of a runtime request: the model-visible history of the path
    `resolve_history` picks (none without `with_history`), the model and both prompts."""
    history = None
    if with_history:
        resolved = await resolve_history(
            db, conversation, before_message_id=before_message_id, through_pk=through_pk
        )
        history = resolved.messages
    return RequestBasis(
        conversation_id=conversation.id,
        owner_id=conversation.owner_id,
        history=history,
        model=model,
        system_prompt=system_prompt,
        instructions=conversation.instructions,
    )


async def latest_metrics(
    db: AsyncSession, conversation: Conversation
) -> tuple[ContextMetrics | None, int | None]:
    """The final metrics snapshot stored with the newest assistant message of the current path
    that has one (among the latest few), and that message's id."""
    path = await branches.steps(db, conversation.current_leaf_pk, limit=2 * METRICS_LOOKBACK)
    looked = 0
    for row in await branches.load(db, path):
        if row.role != Role.ASSISTANT:
            continue
        looked += 1
        snapshot = (row.result or {}).get("context_metrics")
        if snapshot:
            try:
                return ContextMetrics.model_validate(snapshot), row.message_id
            except ValidationError:
                log.warning("message %s holds an unreadable metrics snapshot", row.id)
        if looked >= METRICS_LOOKBACK:
            break
    return None, None


def prompt_tokens(config: RuntimeConfig, model: str, prompt: str | None) -> int:
    """The size of a system prompt in `model`'s tokens, as its profile counts text."""
    return text_counter_for(config.profile(model)).count(prompt) if prompt else 0
