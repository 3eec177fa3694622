"""The empty guard: lets every request through unchanged.

Used when no guard factory is configured and by the runtime benchmark's empty-guard case. It
counts nothing itself; its metrics report the provider's own input count of the last call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from chat_shell.contracts import CompactionRecord, ContextMetrics
from chat_shell.guard.protocol import GuardContext


class PassthroughGuard:
    def __init__(self, context: GuardContext) -> None:
        self._profile = context.profile

    async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"llm_input_messages": state["messages"]}

    def annotate_responses(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return list(messages)

    def final_metrics(self, messages: Sequence[BaseMessage]) -> ContextMetrics:
        profile = self._profile
        reported = next(
            (
                m.usage_metadata["input_tokens"]
                for m in reversed(messages)
                if isinstance(m, AIMessage) and m.usage_metadata
            ),
            0,
        )
        reserved = min(profile.max_output_tokens, profile.context_window // 2)
        available = profile.context_window - reserved
        remaining = max(0, available - reported)
        return ContextMetrics(
            phase="final",
            profile=profile.name,
            profile_source=profile.source,
            context_window=profile.context_window,
            reserved_output=reserved,
            available_input=available,
            used_input=reported,
            remaining=remaining,
            remaining_percent=round(100.0 * remaining / available, 2) if available else 0.0,
            trigger=available,
            keep=available,
            over_trigger=reported >= available,
            state="normal",
            breakdown={},
            estimate_source="reported",
        )

    @property
    def compactions(self) -> list[CompactionRecord]:
        return []


def passthrough_guard_factory(context: GuardContext) -> PassthroughGuard:
    return PassthroughGuard(context)
