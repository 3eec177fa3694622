"""Spans and metrics per model call.

`model_call` wraps one call of a chat model the runtime created (`create_chat_model`): the
answering model's calls and the summarizer's. It wraps the whole call rather than listening to
LangChain callbacks, because a model callback is dispatched for every streamed token. The turn a
call belongs to comes from a context variable the turn sets for its run (`TurnTelemetry.run`),
or a `task_scope` for work between turns; other calls, or any with telemetry off, are not
traced. Spans follow the OpenTelemetry GenAI conventions (`gen_ai.request.model`,
`gen_ai.usage.input_tokens`, ...). Nothing here records message content: only sizes, names and
outcomes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from chat_shell.observability import instruments
from chat_shell.providers.errors import classify_provider_error
from chat_shell.telemetry import sdk_installed, tracer


@dataclass(frozen=True)
class TurnScope:
    """What a model call needs from the turn it belongs to."""

    parent: Context
    profile_label: str


current_turn: ContextVar[TurnScope | None] = ContextVar("chat_shell_turn_scope", default=None)


class ModelCall:
    """The span and labels of one model call in progress."""

    def __init__(self, span: Span, scope: TurnScope, purpose: str) -> None:
        self.span = span
        self.scope = scope
        self.purpose = purpose

    def succeeded(self, reply: BaseMessage) -> None:
        label = self.scope.profile_label
        labels = {"model_profile": label, "purpose": self.purpose}
        usage = getattr(reply, "usage_metadata", None) or {}
        meta = reply.response_metadata or {}
        attributes: dict[str, Any] = {}
        input_tokens, output_tokens = usage.get("input_tokens"), usage.get("output_tokens")
        if isinstance(input_tokens, int):
            attributes["gen_ai.usage.input_tokens"] = input_tokens
            instruments.input_tokens.add(input_tokens, labels)
        if isinstance(output_tokens, int):
            attributes["gen_ai.usage.output_tokens"] = output_tokens
            instruments.output_tokens.add(output_tokens, labels)
        if meta.get("model_name"):
            attributes["gen_ai.response.model"] = meta["model_name"]
        if isinstance(meta.get("id"), str):
            attributes["gen_ai.response.id"] = meta["id"]
        if meta.get("finish_reason"):
            attributes["gen_ai.response.finish_reasons"] = [meta["finish_reason"]]
        self.span.set_attributes(attributes)
        instruments.model_calls.add(1, {**labels, "outcome": "ok"})

    def failed(self, error: BaseException) -> None:
        labels = {"model_profile": self.scope.profile_label, "purpose": self.purpose}
        if isinstance(error, asyncio.CancelledError):
            self.span.set_attribute("error.type", "cancelled")
            instruments.model_calls.add(1, {**labels, "outcome": "cancelled"})
            return
        failure = classify_provider_error(error)
        # A stable code or the class name, never the message: provider messages can quote the request.
        kind = failure.code if failure is not None else type(error).__name__
        self.span.set_attribute("error.type", kind)
        self.span.set_status(Status(StatusCode.ERROR, kind))
        instruments.model_calls.add(1, {**labels, "outcome": "error"})
        if kind == "context_overflow":
            # Counted per call, so the summarizer's own overflows are seen too.
            instruments.overflow_errors.add(1, labels)


@contextmanager
def task_scope(name: str, profile_label: str, attributes: dict[str, Any]) -> Iterator[None]:
    """A span for model work outside any turn (a conversation's title), current while the body
    runs, so its model calls are traced and counted like a turn's (nothing with telemetry off)."""
    if not sdk_installed():
        yield
        return
    span = tracer.start_span(name, attributes=attributes)
    scope_token = current_turn.set(TurnScope(trace.set_span_in_context(span), profile_label))
    try:
        yield
    finally:
        current_turn.reset(scope_token)
        span.end()


@contextmanager
def model_call(
    purpose: str, model: str, max_tokens: int | None, messages: object
) -> Iterator[ModelCall | None]:
    """A `chat {model}` span around one model call of the current turn (None outside a turn)."""
    scope = current_turn.get()
    if scope is None:
        yield None
        return
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model,
        "chat_shell.call.purpose": purpose,
    }
    if isinstance(messages, list):
        attributes["chat_shell.request.messages"] = len(messages)
    if max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    span = tracer.start_span(
        f"chat {model}", context=scope.parent, kind=SpanKind.CLIENT, attributes=attributes
    )
    call = ModelCall(span, scope, purpose)
    try:
        yield call
    except BaseException as error:
        call.failed(error)
        raise
    finally:
        span.end()
