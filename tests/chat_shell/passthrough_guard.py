"""A guard that lets every request through unchanged, for runtime tests that need a guard of
their own (one that records, refuses, summarizes or reports on cue) around the real runtime.

It counts nothing itself: its final snapshot reports the provider's own input count of the last
call against the turn's real budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from chat_shell.contracts import CompactionRecord, ContextMetrics
from chat_shell.guard.metrics_tracker import remaining_percent
from chat_shell.guard.protocol import GuardContext


class PassthroughGuard:
    def __init__(self, context: GuardContext) -> None:
        self._profile = context.profile
        self._budget = context.budget

    async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"llm_input_messages": state["messages"]}

    def annotate_responses(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return list(messages)

    def final_metrics(self, messages: Sequence[BaseMessage]) -> ContextMetrics:
        budget = self._budget
        reported = next(
            (
                m.usage_metadata["input_tokens"]
                for m in reversed(messages)
                if isinstance(m, AIMessage) and m.usage_metadata
            ),
            0,
        )
        return ContextMetrics(
            phase="final",
            profile=self._profile.name,
            profile_source=self._profile.source,
            context_window=budget.context_window,
            reserved_output=budget.reserved_output,
            available_input=budget.available_input,
            used_input=reported,
            remaining=max(0, budget.available_input - reported),
            remaining_percent=remaining_percent(reported, budget.available_input),
            trigger=budget.trigger,
            keep=budget.keep,
            over_trigger=reported >= budget.trigger,
            state="normal",
            breakdown={},
            estimate_source="reported",
        )

    @property
    def compactions(self) -> list[CompactionRecord]:
        return []
