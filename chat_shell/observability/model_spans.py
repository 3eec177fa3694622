"""Spans and metrics per model call, from the chat model's own LangChain callbacks.

`MODEL_CALLS` is attached to every chat model the runtime creates (`create_chat_model`), as
a local callback of the model: it sees each model run (the answering model, and a summarizer
called inside the pre-model hook) and none of the graph's other runs. The turn a call belongs
to comes from a context variable the turn sets for its run (`TurnTelemetry.run`); calls made
outside a turn are not traced. Spans follow the OpenTelemetry GenAI conventions
(`gen_ai.request.model`, `gen_ai.usage.input_tokens`, ...). Nothing here records message
content: only sizes, names and outcomes.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from chat_shell.agents.transcript import ANSWERING_NODE
from chat_shell.observability import instruments
from chat_shell.providers.errors import classify_provider_error
from chat_shell.telemetry import tracer

_PURPOSES = {ANSWERING_NODE: "answer", "pre_model_hook": "summary"}


@dataclass(frozen=True)
class TurnScope:
    """What a model call needs from the turn it belongs to."""

    parent: Context
    profile_label: str
    available_input: int


current_turn: ContextVar[TurnScope | None] = ContextVar("chat_shell_turn_scope", default=None)


def call_purpose(metadata: Mapping[str, Any] | None) -> str:
    """What a model call was for, from the graph node that made it (a bounded label)."""
    node = (metadata or {}).get("langgraph_node")
    return _PURPOSES.get(node, "other") if isinstance(node, str) else "other"


def _usage(response: LLMResult) -> tuple[int | None, int | None, str | None, str | None, str | None]:
    """(input tokens, output tokens, response model, response id, finish reason) of a reply."""
    for generations in response.generations:
        for generation in generations:
            if isinstance(generation, ChatGeneration):
                message = generation.message
                usage = getattr(message, "usage_metadata", None) or {}
                meta = message.response_metadata or {}
                return (
                    usage.get("input_tokens"),
                    usage.get("output_tokens"),
                    meta.get("model_name"),
                    meta.get("id") if isinstance(meta.get("id"), str) else None,
                    meta.get("finish_reason"),
                )
    return None, None, None, None, None


@dataclass
class _Call:
    span: Span
    scope: TurnScope
    purpose: str


class ModelCallTracer(BaseCallbackHandler):
    """A `chat {model}` span and the call metrics for each model run inside a turn."""

    # Called in the model's own task, no executor hop: the work here is a few attribute sets.
    run_inline = True

    def __init__(self) -> None:
        self._calls: dict[UUID, _Call] = {}

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        invocation_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        scope = current_turn.get()
        if scope is None:
            return
        params = invocation_params or {}
        meta = metadata or {}
        model = params.get("model") or params.get("model_name") or meta.get("ls_model_name") or "unknown"
        purpose = call_purpose(meta)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
            "chat_shell.call.purpose": purpose,
            "chat_shell.request.messages": sum(len(batch) for batch in messages),
        }
        max_tokens = params.get("max_tokens") or params.get("max_completion_tokens")
        if isinstance(max_tokens, int):
            attributes["gen_ai.request.max_tokens"] = max_tokens
        span = tracer.start_span(
            f"chat {model}", context=scope.parent, kind=SpanKind.CLIENT, attributes=attributes
        )
        self._calls[run_id] = _Call(span, scope, purpose)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._calls.pop(run_id, None)
        if call is None:
            return
        input_tokens, output_tokens, response_model, response_id, finish = _usage(response)
        label = call.scope.profile_label
        labels = {"model_profile": label, "purpose": call.purpose}
        attributes: dict[str, Any] = {}
        if isinstance(input_tokens, int):
            attributes["gen_ai.usage.input_tokens"] = input_tokens
            instruments.input_tokens.add(input_tokens, labels)
            if call.purpose == "answer":
                utilization = input_tokens / max(1, call.scope.available_input)
                instruments.context_utilization.record(utilization, {"model_profile": label})
        if isinstance(output_tokens, int):
            attributes["gen_ai.usage.output_tokens"] = output_tokens
            instruments.output_tokens.add(output_tokens, labels)
        if response_model:
            attributes["gen_ai.response.model"] = response_model
        if response_id:
            attributes["gen_ai.response.id"] = response_id
        if finish:
            attributes["gen_ai.response.finish_reasons"] = [finish]
        call.span.set_attributes(attributes)
        instruments.model_calls.add(1, {**labels, "outcome": "ok"})
        call.span.end()

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._calls.pop(run_id, None)
        if call is None:
            return
        failure = classify_provider_error(error)
        # A stable code or the class name, never the message: provider messages can quote the request.
        kind = failure.code if failure is not None else type(error).__name__
        call.span.set_attribute("error.type", kind)
        call.span.set_status(Status(StatusCode.ERROR, kind))
        outcome = "cancelled" if type(error).__name__ in {"CancelledError", "GeneratorExit"} else "error"
        labels = {"model_profile": call.scope.profile_label, "purpose": call.purpose, "outcome": outcome}
        instruments.model_calls.add(1, labels)
        if kind == "context_overflow":
            # Counted per call, so the summarizer's own overflows are seen too.
            instruments.overflow_errors.add(
                1, {"model_profile": labels["model_profile"], "purpose": call.purpose}
            )
        call.span.end()

    def abandon(self, scope: TurnScope) -> None:
        """Ends the spans of a turn's calls that never reported back (a cancelled attempt)."""
        for run_id, call in list(self._calls.items()):
            if call.scope is scope:
                del self._calls[run_id]
                call.span.set_attribute("error.type", "cancelled")
                call.span.end()


MODEL_CALLS = ModelCallTracer()
