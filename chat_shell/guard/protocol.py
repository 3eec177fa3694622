"""The contract between the turn runtime and the context guard.

The runtime builds one guard per turn attempt through a `GuardFactory` and installs it as the
first hook of `pre_model_hook` (SPEC 5.1). The guard owns every decision about what the model
sees; the runtime owns the graph, streaming, retries and the finalizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.messages import BaseMessage, HumanMessage

from chat_shell.accounting.budget import Budget
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.contracts import AttachmentReader, CompactionRecord, ContextMetrics, TurnEvent
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from chat_shell.providers.profiles import ModelProfile
from chat_shell.tools.registry import ToolSet

# Events the guard emits (metrics, compaction status) go into the turn's ordered stream.
EventSink = Callable[[TurnEvent], None]
# The tools offered with a view: the messages the model is about to see in, the tool set bound
# to that call out (built-in tools by the view's facts, then the turn's MCP tools). Asked before
# every estimate, so a compaction that puts a summary in view offers the history tools in the
# same call; the set's schema tokens are counted once per set (`ToolSet.schema_tokens`).
ToolOffer = Callable[[Sequence[BaseMessage]], ToolSet]

GUIDANCE_ID = "attempt-guidance"


def guidance_message(text: str) -> HumanMessage:
    """The attempt guidance as the model receives it after the view (see attempt_guidance)."""
    return HumanMessage(content=text, id=GUIDANCE_ID)


def fixed_tools(schemas: Sequence[dict[str, Any]] = ()) -> ToolOffer:
    """The same tool schemas whatever the view holds (a guard run without a runtime's tools)."""
    held = ToolSet((), tuple(schemas))
    return lambda _messages: held


class Summarizer(Protocol):
    """One summarizer model call (SPEC 5.3): the request's messages in, the summary text out.
    Provider errors propagate as raised; the compaction stage classifies them."""

    async def __call__(self, messages: list[BaseMessage]) -> str: ...


class ContextRefused(Exception):
    """The request cannot fit the window even after every stage (SPEC 5.2.5).

    Raised from the pre-model hook so the provider is never called; the runtime ends the turn
    with `message` shown to the user and termination reason `context_refused`.
    """

    def __init__(self, message: str, *, needed_tokens: int, available_tokens: int) -> None:
        super().__init__(message)
        self.message = message
        self.needed_tokens = needed_tokens
        self.available_tokens = available_tokens


@dataclass(frozen=True)
class GuardContext:
    profile: ModelProfile
    # The turn's budget (computed once per turn from the profile) and its token counter.
    budget: Budget
    counter: TokenCounter
    conversation_id: int
    turn_id: int
    # The tools bound to each model call, decided on its view: their schemas count as input.
    tools: ToolOffer
    emit: EventSink
    # Ids of the messages the turn started with (the TurnContext's `original_input_ids`).
    original_input_ids: frozenset[str] = field(default_factory=frozenset)
    attachments: AttachmentReader | None = None
    # Set by the overflow safety net: compact on the next hook call whatever the estimate says.
    force_compaction: bool = False
    # The model call summary compaction uses (None: no summary stage), and its settings.
    summarizer: Summarizer | None = None
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    # The assistant message the turn writes: where a checkpoint made in this turn is stored.
    assistant_message_id: int | None = None
    # The attempt guidance appended after the guard to the attempt's first model call: counted
    # in that call's request, never part of the view.
    guidance: str | None = None


class TurnGuard(Protocol):
    async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
        """The pre-model hook. Always returns `llm_input_messages`; may return `messages` updates
        (same-id upserts, or RemoveMessage(REMOVE_ALL_MESSAGES) + summary + retained tail)."""
        ...

    def annotate_responses(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The final state's messages with calibration samples recorded on each AIMessage the
        guard saw requested (local tokens of the request as sent, provider input tokens)."""
        ...

    def final_metrics(self, messages: Sequence[BaseMessage]) -> ContextMetrics:
        """The end-of-turn snapshot (phase `final`) over the authoritative final state."""
        ...

    @property
    def compactions(self) -> list[CompactionRecord]:
        """Every compaction attempt of this turn, in order (SPEC 5.3)."""
        ...


GuardFactory = Callable[[GuardContext], TurnGuard]
