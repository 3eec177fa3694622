"""A turn as a sequence of attempts, each a graph run on its own fresh thread.

An attempt ends in one of a few ways; `next_attempt` decides from that ending whether the turn
goes on with another attempt (seeded from the current, sanitized state as message objects)
or is finished. New retry policies (e.g. "overflow -> force compaction -> retry once") are a
branch here plus an `AttemptReason`; the runner executes any plan the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from langchain_core.messages import BaseMessage

from chat_shell.agents.attempt_guidance import TOOL_LIMIT_GUIDANCE, truncation_guidance
from chat_shell.agents.finalizer import without_step_limit_reply
from chat_shell.guard.protocol import ContextRefused
from chat_shell.messages.tool_pairs import sanitize_tool_pairs
from chat_shell.providers.errors import ProviderFailure

AttemptReason = Literal["initial", "truncation_retry", "tool_limit_recovery", "overflow_retry"]
Ending = Literal["completed", "step_limit", "truncated", "refused", "provider_error", "cancelled"]


@dataclass(frozen=True)
class AttemptPlan:
    number: int
    reason: AttemptReason
    # The input of the attempt's fresh thread: real message objects with their ids.
    seed: list[BaseMessage]
    # Appended to the model input only (see attempt_guidance).
    guidance: str | None = None
    # Passed to the attempt's guard (GuardContext.force_compaction).
    force_compaction: bool = False
    # One tool-less model call (the tool-limit recovery reply).
    answer_only: bool = False
    truncation_retries: int = 0
    # Overflow retries so far in this turn (at most one: SPEC 5.4).
    overflow_retries: int = 0

    @classmethod
    def first(cls, messages: Sequence[BaseMessage]) -> AttemptPlan:
        return cls(number=1, reason="initial", seed=list(messages))

    def retry(
        self,
        reason: AttemptReason,
        state: Sequence[BaseMessage],
        *,
        guidance: str | None = None,
        force_compaction: bool = False,
        answer_only: bool = False,
    ) -> AttemptPlan:
        """The next attempt, seeded from `state` with tool pairs repaired."""
        return replace(
            self,
            number=self.number + 1,
            reason=reason,
            seed=sanitize_tool_pairs(without_step_limit_reply(state)),
            guidance=guidance,
            force_compaction=force_compaction,
            answer_only=answer_only,
            truncation_retries=self.truncation_retries + (reason == "truncation_retry"),
            overflow_retries=self.overflow_retries + (reason == "overflow_retry"),
        )


@dataclass(frozen=True)
class AttemptOutcome:
    plan: AttemptPlan
    ending: Ending
    # The attempt's authoritative final state (`aget_state`), whatever way it ended.
    messages: list[BaseMessage]
    failure: ProviderFailure | None = None
    refusal: ContextRefused | None = None


OVERFLOW_REFUSAL = (
    "This conversation no longer fits {model}'s context window ({available:,} input tokens): the "
    "provider rejected the request as too long, and again after the earlier turns were summarized. "
    "Start a new conversation, or send a shorter message."
)


def is_overflow(outcome: AttemptOutcome) -> bool:
    return outcome.failure is not None and outcome.failure.code == "context_overflow"


def next_attempt(outcome: AttemptOutcome, *, max_truncation_retries: int) -> AttemptPlan | None:
    plan = outcome.plan
    if is_overflow(outcome) and plan.overflow_retries == 0:
        # The provider counted more than our estimate: compact whatever the estimate says and
        # retry once, as the same kind of call (a recovery reply stays a recovery reply).
        return plan.retry(
            "overflow_retry",
            outcome.messages,
            guidance=plan.guidance,
            force_compaction=True,
            answer_only=plan.answer_only,
        )
    if outcome.ending == "step_limit" and not plan.answer_only:
        return plan.retry(
            "tool_limit_recovery", outcome.messages, guidance=TOOL_LIMIT_GUIDANCE, answer_only=True
        )
    if outcome.ending == "truncated" and plan.truncation_retries < max_truncation_retries:
        attempt = plan.truncation_retries + 1
        return plan.retry(
            "truncation_retry",
            outcome.messages,
            guidance=truncation_guidance(attempt, max_truncation_retries),
        )
    return None


def refuse_repeated_overflow(outcome: AttemptOutcome, *, model: str, available_tokens: int) -> AttemptOutcome:
    """An overflow after the overflow retry ends the turn with the clear refusal of SPEC 5.2.5,
    never another retry; any other outcome is returned as is."""
    if not is_overflow(outcome) or outcome.plan.overflow_retries == 0:
        return outcome
    refusal = ContextRefused(
        OVERFLOW_REFUSAL.format(model=model, available=available_tokens),
        # The provider's own count is not known; it is more than the window holds.
        needed_tokens=available_tokens,
        available_tokens=available_tokens,
    )
    return replace(outcome, ending="refused", refusal=refusal)
