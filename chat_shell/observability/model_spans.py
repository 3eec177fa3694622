"""Spans and metrics per model call and per tool call, from LangChain callbacks.

One `CallTracer` per turn rides in the run config of every attempt, so it sees each chat-model
run (the answering model, and a summarizer called inside the pre-model hook) and each tool run
without touching the agent code. Spans follow the OpenTelemetry GenAI conventions
(`gen_ai.request.model`, `gen_ai.usage.input_tokens`, ...). Nothing here records message
content or tool arguments: only sizes, names and outcomes.
"""

from __future__ import annotations

from collections.abc import Mapping
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


class CallTracer(BaseCallbackHandler):
    """Per turn: a `chat {model}` span per model call and an `execute_tool {name}` span per tool."""

    # Called in the model's own task, no executor hop: the work here is a few attribute sets.
    run_inline = True
    # Only model and tool runs matter (tool events come under `ignore_agent`): skip the
    # dispatch of every graph node's chain events.
    ignore_chain = True
    ignore_retriever = True
    ignore_retry = True
    ignore_custom_event = True

    def __init__(self, parent: Context, *, profile_label: str, available_input: int) -> None:
        self._parent = parent
        self._label = profile_label
        self._available = max(1, available_input)
        self._spans: dict[UUID, tuple[Span, str]] = {}

    # -- model calls -----------------------------------------------------------------------

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
        if isinstance(params.get("temperature"), int | float):
            attributes["gen_ai.request.temperature"] = params["temperature"]
        span = tracer.start_span(
            f"chat {model}", context=self._parent, kind=SpanKind.CLIENT, attributes=attributes
        )
        self._spans[run_id] = (span, purpose)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        entry = self._spans.pop(run_id, None)
        if entry is None:
            return
        span, purpose = entry
        input_tokens, output_tokens, response_model, response_id, finish = _usage(response)
        labels = {"model_profile": self._label, "purpose": purpose}
        attributes: dict[str, Any] = {}
        if isinstance(input_tokens, int):
            attributes["gen_ai.usage.input_tokens"] = input_tokens
            instruments.input_tokens.add(input_tokens, labels)
            if purpose == "answer":
                instruments.context_utilization.record(
                    input_tokens / self._available, {"model_profile": self._label}
                )
        if isinstance(output_tokens, int):
            attributes["gen_ai.usage.output_tokens"] = output_tokens
            instruments.output_tokens.add(output_tokens, labels)
        if response_model:
            attributes["gen_ai.response.model"] = response_model
        if response_id:
            attributes["gen_ai.response.id"] = response_id
        if finish:
            attributes["gen_ai.response.finish_reasons"] = [finish]
        span.set_attributes(attributes)
        instruments.model_calls.add(1, {**labels, "outcome": "ok"})
        span.end()

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        entry = self._spans.pop(run_id, None)
        if entry is None:
            return
        span, purpose = entry
        failure = classify_provider_error(error)
        _fail(span, error, failure.code if failure is not None else None)
        outcome = "cancelled" if _is_cancellation(error) else "error"
        instruments.model_calls.add(1, {"model_profile": self._label, "purpose": purpose, "outcome": outcome})
        span.end()

    # -- tool calls ------------------------------------------------------------------------

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        name = (serialized or {}).get("name") or kwargs.get("name") or "tool"
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        call_id = kwargs.get("tool_call_id")
        if isinstance(call_id, str):
            attributes["gen_ai.tool.call.id"] = call_id
        span = tracer.start_span(f"execute_tool {name}", context=self._parent, attributes=attributes)
        self._spans[run_id] = (span, "tool")

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        entry = self._spans.pop(run_id, None)
        if entry is not None:
            if getattr(output, "status", None) == "error":
                entry[0].set_status(Status(StatusCode.ERROR, "the tool reported an error"))
            entry[0].end()

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        entry = self._spans.pop(run_id, None)
        if entry is not None:
            _fail(entry[0], error)
            entry[0].end()

    def close(self) -> None:
        """Ends spans whose runs never reported back (a cancelled attempt)."""
        for span, _ in self._spans.values():
            span.set_attribute("error.type", "cancelled")
            span.end()
        self._spans.clear()


def _is_cancellation(error: BaseException) -> bool:
    return type(error).__name__ in {"CancelledError", "GeneratorExit"}


def _fail(span: Span, error: BaseException, code: str | None = None) -> None:
    # A stable code or the class name, never the message: provider messages can quote the request.
    kind = code or type(error).__name__
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, kind))
