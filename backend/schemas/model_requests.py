"""The model request a conversation's owner is shown ("What the model sees", issue 19)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from chat_shell.contracts import RequestSource


class ShownEntry(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "tool_schema"]
    source: RequestSource
    tokens: int
    name: str | None = None
    server: str | None = None
    # None with `text_hidden`: the operator's system prompt, shown to operators only.
    text: str | None
    text_hidden: bool = False
    preview_tokens: int | None = None
    message_id: str | None = None


class ModelRequestView(BaseModel):
    conversation_id: int
    # sent: `entries` is the last request of the latest finished turn; no_model_call: that turn
    # ended before calling the model (`note` says why); no_turns: nothing was sent yet; next:
    # the request the next turn would send before the user's message; unavailable: that request
    # cannot be shown here (`note` says why).
    state: Literal["sent", "no_model_call", "no_turns", "next", "unavailable"]
    turn_id: int | None = None
    turn_status: str | None = None
    note: str | None = None
    # Model calls the turn made; the attempt the shown (last) one belonged to.
    calls: int = 0
    attempt: int | None = None
    entries: list[ShownEntry] = Field(default_factory=list)
    framing_tokens: int = 0
    total_tokens: int = 0
    # With `next`: the history reaches the trigger, so the next turn summarizes it first.
    summary_due: bool = False
