"""How a turn ends, from the outcome of its last attempt (SPEC 5.5): its termination reason and
the terminal event the caller gets."""

from __future__ import annotations

from chat_shell.agents.attempts import AttemptOutcome, Ending
from chat_shell.agents.finalizer import has_unexecuted_tool_calls
from chat_shell.contracts import (
    TerminationReason,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnFailed,
    TurnResult,
)


def termination_reason(outcome: AttemptOutcome) -> TerminationReason:
    if outcome.ending == "completed" and has_unexecuted_tool_calls(outcome.messages):
        # e.g. a provider that ignores tool_choice="none" in the recovery reply
        return "completed_with_unexecuted_tool_calls"
    if outcome.plan.reason == "tool_limit_recovery" and outcome.ending in ("completed", "step_limit"):
        return "tool_limit_recovery"
    if outcome.ending == "completed":
        return "normal_completion"
    reasons: dict[Ending, TerminationReason] = {
        "truncated": "truncation_retry_exhausted",
        "refused": "context_refused",
        "provider_error": "provider_error",
        "cancelled": "cancelled",
        "step_limit": "tool_limit_recovery",
    }
    return reasons[outcome.ending]


def terminal_event(outcome: AttemptOutcome, result: TurnResult) -> TurnEvent:
    partial = result.value
    if outcome.ending == "cancelled":
        return TurnCancelled(partial=partial, result=result)
    if outcome.refusal is not None:
        return TurnFailed(
            code="context_refused", message=outcome.refusal.message, partial=partial, result=result
        )
    if outcome.failure is not None:
        return TurnFailed(
            code=outcome.failure.code, message=outcome.failure.message, partial=partial, result=result
        )
    if outcome.ending == "truncated":
        return TurnFailed(
            code="truncation_retry_exhausted",
            message=(
                "The model's tool call was cut off at its output limit on every attempt "
                f"({outcome.plan.truncation_retries + 1})."
            ),
            partial=partial,
            result=result,
        )
    return TurnCompleted(result=result)
