"""Bodies of the model-visible history endpoints (the model's view, never the transcript)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from chat_shell.contracts import ChainMessage, ContextMetrics


class ModelContext(BaseModel):
    """What the model will see on the next turn of a conversation (not the transcript)."""

    conversation_id: int
    view: Literal["model"] = "model"
    model: str
    # The operator's system prompt is the operator's: users see only its size in tokens.
    system_prompt_tokens: int
    # The conversation's own instructions (sent after the operator's prompt).
    instructions: str | None
    # The assistant message whose compaction checkpoint opens `history` (None: no compaction).
    checkpoint_message_id: int | None
    history: list[ChainMessage]
    # The final snapshot stored with the latest assistant message that has one.
    metrics: ContextMetrics | None
    metrics_message_id: int | None
