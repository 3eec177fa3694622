"""What the guard hands its summary stage, and what it gets back (SPEC 5.3)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage

from chat_shell.accounting.budget import Budget
from chat_shell.accounting.calibration import Estimate
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.contracts import CompactionRecord
from chat_shell.guard.protocol import EventSink


@dataclass(frozen=True)
class SummaryRequest:
    """The view after the source stages, with its cached counts."""

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


# The summary stage the guard calls (`SummaryCompactor`, or a test's own).
SummaryStage = Callable[[SummaryRequest], Awaitable[SummaryOutcome]]
