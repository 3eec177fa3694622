"""The OpenAI-compatible chat model client (any endpoint speaking `/v1/chat/completions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI

from chat_shell.messages.tool_images import move_tool_images
from chat_shell.providers.model_spans import model_call
from chat_shell.providers.profiles import ModelProfile


@dataclass(frozen=True)
class ProviderConfig:
    base_url: str
    api_key: str = "not-needed"
    timeout_seconds: float = 120.0
    # Retries of the openai client itself (connection errors, 408/409/429/5xx); kept small so a
    # failing provider surfaces as a clear turn error instead of minutes of silent retrying.
    max_retries: int = 1


def join_text_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages with text-only content part lists joined into one string."""
    joined = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and all(
            isinstance(part, dict) and part.get("type") == "text" for part in content
        ):
            message = {**message, "content": "".join(part["text"] for part in content)}
        joined.append(message)
    return joined


class TracedChatOpenAI(ChatOpenAI):
    """`ChatOpenAI` whose calls inside a turn get a span and the model-call metrics, and whose
    requests carry a tool result's pictures in a user message after the tool messages (chat
    APIs take only text in a tool message; `chat_shell.messages.tool_images`)."""

    # What the calls are for, a bounded metric label: `answer`, `summary` or `title`.
    call_purpose: str = "answer"

    def _get_request_payload(
        self, input_: LanguageModelInput, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        if "messages" in payload:
            payload["messages"] = self._sent_messages(payload["messages"])
        return payload

    def _sent_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The request's messages as this provider takes them."""
        return move_tool_images(messages)

    async def ainvoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        with model_call(self.call_purpose, self.model_name, self.max_tokens, input) as call:
            reply = await super().ainvoke(input, config, stop=stop, **kwargs)
            if call is not None:
                call.succeeded(reply)
            return reply


class StringContentChatOpenAI(TracedChatOpenAI):
    """For servers whose chat template concatenates `content` as a string (llama.cpp serving a
    GGUF chat template fails on a list of parts): text parts are sent as one string."""

    def _sent_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return join_text_parts(super()._sent_messages(messages))


def create_chat_model(
    profile: ModelProfile,
    config: ProviderConfig,
    *,
    purpose: str = "answer",
    model_name: str | None = None,
    temperature: float | None = None,
) -> TracedChatOpenAI:
    """A `ChatOpenAI` for `profile` against `config`'s endpoint, asking for `model_name` (the
    provider's name of the model) or else the profile's name, with the profile's sampling;
    `temperature` (summaries, titles) replaces the profile's. Sampling left None is not sent (the
    provider's default).

    `stream_usage=True` always: with a custom `base_url` langchain-openai leaves it off, so no
    `stream_options` are sent and streamed responses carry no usage at all. With telemetry on,
    each call inside a turn gets a span and the model-call metrics, labelled with `purpose`.
    """
    model_class = StringContentChatOpenAI if profile.string_content_only else TracedChatOpenAI
    llama_sampling = {
        "top_k": profile.top_k,
        "min_p": profile.min_p,
        "repeat_penalty": profile.repeat_penalty,
    }
    return model_class(
        model=model_name or profile.name,
        base_url=config.base_url,
        api_key=config.api_key,
        timeout=config.timeout_seconds,
        max_retries=config.max_retries,
        max_tokens=profile.max_output_tokens,
        temperature=profile.temperature if temperature is None else temperature,
        top_p=profile.top_p,
        extra_body={name: value for name, value in llama_sampling.items() if value is not None} or None,
        stream_usage=True,
        # langchain-openai bounds each streamed chunk with `asyncio.wait_for`, which on Python
        # 3.11 loses a cancellation that lands as a chunk arrives (a stopped turn would then run
        # on until a timeout) and costs a task per chunk; `timeout` above bounds every read.
        stream_chunk_timeout=None,
        call_purpose=purpose,
    )
