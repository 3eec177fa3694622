"""The pluggable stages of the guard (SPEC 5.2).

Source stages (tool outputs, attachment previews, ...) each own a kind of message and decide
how it is shown to the model under a normal and an emergency policy. The request stage
(summary compaction) rewrites the whole view; it plugs in between the source stages and the
emergency stage through `SummaryCompactor`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from langchain_core.messages import BaseMessage

from chat_shell.compression.budget import Budget
from chat_shell.compression.calibration import Estimate
from chat_shell.compression.token_counter import TokenCounter
from chat_shell.contracts import CompactionRecord
from chat_shell.guard.protocol import EventSink

EMERGENCY_RATIO = 0.3


@dataclass(frozen=True)
class SourceContext:
    counter: TokenCounter
    budget: Budget


class GuardSource(Protocol):
    """A source stage. On each hook call the guard first lets the source `prepare` the new
    messages, then calls `render` once for every new message the source `applies_to` (normal
    policy), and again, largest messages first, in the emergency stage."""

    # The trace operation: `context_protection.<name>` (SPEC 5.8).
    name: str
    # True when the normal render adds content the message does not hold (attachment previews)
    # rather than cutting it: such a source records its own trace event, when it cut something,
    # since the message's token growth says nothing about that. Emergency renders only cut, and
    # the guard traces them for every source.
    adds_content: bool

    def applies_to(self, message: BaseMessage) -> bool: ...

    async def prepare(self, messages: Sequence[BaseMessage], ctx: SourceContext) -> None:
        """Fetch what rendering `messages` (the new ones, as shown) needs, e.g. attachment text,
        so that `render` stays synchronous and free of I/O."""
        ...

    def render(
        self, message: BaseMessage, tokens: int, ctx: SourceContext, *, emergency: bool
    ) -> BaseMessage | None:
        """The message as the model must see it, with the same id and type, or None when it
        already fits the policy (normal, or emergency = normal × `EMERGENCY_RATIO`). `tokens`
        is the cached count of the whole message (an upper bound of its content), so a message
        that obviously fits costs nothing.

        Must be idempotent: rendering its own output under the same policy returns None, and
        a stricter policy shortens the rendered form without nesting it. The input message is
        never mutated.
        """
        ...

    def attribute(self, message: BaseMessage, tokens: int, ctx: SourceContext) -> Mapping[str, int]:
        """Breakdown claims (SPEC 5.7): how many of the message's `tokens` belong to which
        source bucket (e.g. `{"attachments": 1200}` for previews inside a user message). The
        rest stays with the message's own bucket."""
        ...


@dataclass(frozen=True)
class SummaryRequest:
    """What a summary compactor gets: the view after the source stages with its cached counts."""

    messages: Sequence[BaseMessage]
    message_tokens: Sequence[int]
    # Tool schemas and reply priming: part of every request, not of any message.
    fixed_tokens: int
    estimate: Estimate
    budget: Budget
    counter: TokenCounter
    emit: EventSink
    # The overflow safety net asked for a compaction whatever the estimate says.
    forced: bool


@dataclass(frozen=True)
class SummaryOutcome:
    record: CompactionRecord
    # The new model-visible history (system, summary, retained tail); None on fallback.
    messages: list[BaseMessage] | None = None


def compaction_target(budget: Budget, current: Estimate, *, forced: bool) -> int:
    """The size a compaction aims for: `keep`; when the provider overflowed although the estimate
    fit (forced), also at most half of that estimate, since the estimate was evidently low."""
    return min(budget.keep, current.effective // 2) if forced else budget.keep


class SummaryCompactor(Protocol):
    async def __call__(self, request: SummaryRequest) -> SummaryOutcome: ...
