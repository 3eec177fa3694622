"""Attempt planning: which ending leads to which fresh-thread attempt, seeded how."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from chat_shell.agents.attempts import AttemptOutcome, AttemptPlan, next_attempt
from chat_shell.agents.builder import STEP_LIMIT_REPLY
from chat_shell.providers.errors import ProviderFailure

STATE = [
    HumanMessage("q", id="u"),
    AIMessage("", id="a1", tool_calls=[{"id": "c1", "name": "t", "args": {}, "type": "tool_call"}]),
    ToolMessage("r", tool_call_id="c1", id="t1"),
    AIMessage("", id="a2", tool_calls=[{"id": "c2", "name": "t", "args": {}, "type": "tool_call"}]),
]


def test_a_step_limit_leads_to_one_answer_only_recovery_without_the_stand_in_reply() -> None:
    state = [*STATE[:3], AIMessage(STEP_LIMIT_REPLY, id="a2")]
    plan = next_attempt(
        AttemptOutcome(AttemptPlan.first(STATE[:1]), "step_limit", state), max_truncation_retries=3
    )
    assert plan is not None and plan.reason == "tool_limit_recovery" and plan.answer_only
    assert [m.id for m in plan.seed] == ["u", "a1", "t1"] and "tool-call limit" in (plan.guidance or "")
    assert next_attempt(AttemptOutcome(plan, "step_limit", plan.seed), max_truncation_retries=3) is None


def test_truncation_retries_count_up_and_stop() -> None:
    plan = AttemptPlan.first(STATE[:1])
    for attempt in (1, 2):
        plan = next_attempt(AttemptOutcome(plan, "truncated", STATE), max_truncation_retries=2)  # type: ignore[assignment]
        assert plan.reason == "truncation_retry" and plan.truncation_retries == attempt
        assert f"Retry {attempt} of 2" in (plan.guidance or "")
        # The unanswered (truncated) call is not carried into the retry.
        assert [m.id for m in plan.seed] == ["u", "a1", "t1"]
    assert next_attempt(AttemptOutcome(plan, "truncated", STATE), max_truncation_retries=2) is None


def test_other_endings_finish_the_turn() -> None:
    first = AttemptPlan.first(STATE[:1])
    failure = ProviderFailure("provider_unavailable", "down")
    for ending in ("completed", "refused", "cancelled"):
        assert next_attempt(AttemptOutcome(first, ending, STATE), max_truncation_retries=3) is None  # type: ignore[arg-type]
    assert (
        next_attempt(AttemptOutcome(first, "provider_error", STATE, failure), max_truncation_retries=3)
        is None
    )


def test_a_retry_can_force_compaction_for_the_next_guard() -> None:
    retry = AttemptPlan.first(STATE[:1]).retry("overflow_retry", STATE, force_compaction=True)
    assert retry.number == 2 and retry.force_compaction and retry.guidance is None
    assert [m.id for m in retry.seed] == ["u", "a1", "t1"]
