"""One turn's telemetry: its span, the metrics its events imply, and the metrics log line.

The turn's events pass through `observe_turn` on their way to the caller, so the turn's
outcome, compactions, tool calls, refusal, overflow errors and time to first token are
measured from the same events the user sees. The turn span is current while the turn runs
(and the turn's scope set for `model_call`), so the guard's `context_protection.*` events and
the per-call spans nest under it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from time import time_ns
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from chat_shell.accounting.budget import Budget
from chat_shell.contracts import (
    FINAL_STATUSES,
    CompactionRecord,
    ToolCompleted,
    ToolStarted,
    TurnEvent,
    TurnRequest,
    TurnResult,
)
from chat_shell.observability import instruments
from chat_shell.providers.model_spans import TurnScope, current_turn
from chat_shell.providers.profiles import ModelProfile
from chat_shell.telemetry import sdk_installed, tracer

logger = logging.getLogger("chat_shell.metrics")

EMERGENCY_STRATEGIES = frozenset({"emergency_truncate", "tail_drop"})


class TurnTelemetry:
    def __init__(
        self, request: TurnRequest, profile: ModelProfile, budget: Budget, *, default_model: str | None
    ) -> None:
        self.request = request
        self.profile = profile
        self.budget = budget
        self.label = instruments.profile_label(profile.name, default_model)
        self._tools: dict[str, Span] = {}
        self._compactions = 0

    async def observe_turn(self, events: AsyncGenerator[TurnEvent, None]) -> AsyncGenerator[TurnEvent, None]:
        """`events`, each observed on its way to the caller. The turn's span starts with the
        first step and ends with the turn, whatever way it ends; it is current (and the turn's
        scope set for `model_call`) while the turn runs, that is inside each step of `events`,
        never while the caller handles an event."""
        self.span = tracer.start_span(
            "invoke_agent chat_shell",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "chat_shell",
                "gen_ai.request.model": self.profile.name,
                "gen_ai.conversation.id": str(self.request.conversation_id),
                "chat_shell.turn.id": self.request.turn_id,
                "chat_shell.model_profile": self.label,
            },
        )
        self.context = trace.set_span_in_context(self.span)
        self._scope = scope = TurnScope(self.context, self.label) if sdk_installed() else None
        try:
            while True:
                token, scope_token = otel_context.attach(self.context), current_turn.set(scope)
                try:
                    event = await anext(events)
                except StopAsyncIteration:
                    return
                finally:
                    current_turn.reset(scope_token)
                    otel_context.detach(token)
                self.observe(event)
                yield event
        finally:
            token, scope_token = otel_context.attach(self.context), current_turn.set(scope)
            try:
                await events.aclose()
            finally:
                current_turn.reset(scope_token)
                otel_context.detach(token)
                for span in self._tools.values():
                    span.set_attribute("error.type", "cancelled")
                    span.end()
                self.span.end()

    def observe(self, event: TurnEvent) -> None:
        match event.type:
            case "tool.started" if self._scope is not None:
                self._tool_started(event)
            case "tool.completed" if self._scope is not None:
                self._tool_completed(event)
            case "context.compaction":
                self._compaction(event.record)
            case "turn.completed" | "turn.failed" | "turn.cancelled":
                self._finish(event.result, getattr(event, "code", None), event.type)

    # -- tool calls ------------------------------------------------------------------------

    def _tool_started(self, event: ToolStarted) -> None:
        # Arguments are never recorded: they can carry what the user wrote.
        self._tools[event.call_id] = tracer.start_span(
            f"execute_tool {event.name}",
            context=self.context,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": event.name,
                "gen_ai.tool.call.id": event.call_id,
                **({"chat_shell.mcp.server": event.server} if event.server else {}),
            },
        )

    def _tool_completed(self, event: ToolCompleted) -> None:
        span = self._tools.pop(event.call_id, None)
        if span is None:
            return
        if event.is_error:
            span.set_status(Status(StatusCode.ERROR, "the tool reported an error"))
        span.end()

    # -- compactions -----------------------------------------------------------------------

    def _compaction(self, record: CompactionRecord) -> None:
        if record.status not in FINAL_STATUSES:
            return
        self._compactions += 1
        count_compaction(self.label, record)
        self._compaction_span(record, _saved(record))

    def _compaction_span(self, record: CompactionRecord, saved: int | None) -> None:
        """A span over the compaction's measured duration (it ended when its event arrived).
        The `context_protection.*` span events come from the stage that did the work."""
        end = time_ns()
        start = end - int((record.duration_ms or 0) * 1_000_000)
        attributes = {
            "chat_shell.compaction.strategy": record.strategy,
            "chat_shell.compaction.status": record.status,
            "chat_shell.compaction.before_tokens": record.before_tokens,
            "chat_shell.compaction.after_tokens": record.after_tokens,
            "chat_shell.compaction.tokens_saved": saved,
            "chat_shell.compaction.removed_items": record.removed_items,
            "chat_shell.compaction.failure_reason": record.failure_reason,
            "chat_shell.compaction.retention_score": record.retention_score,
        }
        span = tracer.start_span(
            f"compaction {record.strategy}",
            context=self.context,
            start_time=start,
            attributes={key: value for key, value in attributes.items() if value is not None},
        )
        if record.status == "fallback":
            span.set_status(Status(StatusCode.ERROR, record.failure_reason or "fallback"))
        span.end(end_time=end)

    # -- the end ---------------------------------------------------------------------------

    def _finish(self, result: TurnResult, code: str | None, terminal: str) -> None:
        reason = result.termination_reason
        instruments.turns.add(1, {"model_profile": self.label, "termination_reason": reason})
        if reason == "context_refused":
            instruments.refusals.add(1, {"model_profile": self.label})
        if result.ttft_ms is not None:
            instruments.time_to_first_token.record(result.ttft_ms, {"model_profile": self.label})
        metrics = result.context_metrics
        if metrics is not None:
            # The meter's and the dashboard's definition: the request the turn leaves, used of
            # the available input.
            used = metrics.used_input / max(1, metrics.available_input)
            instruments.context_utilization.record(used, {"model_profile": self.label})
        usage = result.usage
        attributes: dict[str, Any] = {
            "chat_shell.termination_reason": reason,
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "chat_shell.model_calls": usage.model_calls,
            "chat_shell.compactions": self._compactions,
            "chat_shell.overflow_errors": result.overflow_errors,
        }
        if result.ttft_ms is not None:
            attributes["chat_shell.ttft_ms"] = round(result.ttft_ms, 3)
        if metrics is not None:
            attributes.update(
                {
                    "chat_shell.context.used_input": metrics.used_input,
                    "chat_shell.context.available_input": metrics.available_input,
                    "chat_shell.context.state": metrics.state,
                }
            )
        self.span.set_attributes(attributes)
        if terminal == "turn.failed":
            self.span.set_attribute("error.type", code or "failed")
            self.span.set_status(Status(StatusCode.ERROR, code or "failed"))
        logger.info(
            "[TurnMetrics] turn=%s conversation=%s profile=%s reason=%s calls=%d input_tokens=%d "
            "output_tokens=%d used=%s available=%s state=%s compactions=%d overflow_errors=%d ttft_ms=%s",
            self.request.turn_id,
            self.request.conversation_id,
            self.label,
            reason,
            usage.model_calls,
            usage.input_tokens,
            usage.output_tokens,
            metrics.used_input if metrics else None,
            metrics.available_input if metrics else None,
            metrics.state if metrics else None,
            self._compactions,
            result.overflow_errors,
            round(result.ttft_ms, 1) if result.ttft_ms is not None else None,
        )


def count_compaction(label: str, record: CompactionRecord) -> None:
    """The operator metrics of one finished compaction (of a turn, or made ahead of time)."""
    labels = {"model_profile": label, "strategy": record.strategy, "status": record.status}
    instruments.compactions.add(1, labels)
    saved = _saved(record)
    if saved is not None:
        instruments.tokens_saved.add(saved, {"model_profile": label, "strategy": record.strategy})
    if record.duration_ms is not None:
        instruments.compaction_duration.record(record.duration_ms, labels)
    if record.strategy in EMERGENCY_STRATEGIES and record.status == "completed":
        instruments.emergency_truncations.add(1, {"model_profile": label, "strategy": record.strategy})


def _saved(record: CompactionRecord) -> int | None:
    if record.before_tokens is None or record.after_tokens is None:
        return None
    return max(0, record.before_tokens - record.after_tokens)
