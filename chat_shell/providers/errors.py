"""Provider failures classified into the stable codes of `turn.failed` (SPEC 5.4, 6.1).

Streaming and non-streaming (`ainvoke`) calls raise the same openai exception classes (the
langchain-openai wrappers subclass them), so one classifier serves both. A context overflow is
recognized only from real evidence: a bare 400 is a bad request, never an overflow.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, replace
from typing import Literal

import openai
from langchain_core.exceptions import ContextOverflowError

ProviderErrorCode = Literal[
    "context_overflow",
    "provider_timeout",
    "provider_unavailable",
    "provider_auth",
    "provider_rate_limited",
    "provider_bad_request",
    "provider_stream_error",
]

# Phrases providers use for "the request does not fit the window" (OpenAI, vLLM, llama.cpp,
# Anthropic-style gateways, Chinese-language gateways).
_OVERFLOW_PATTERN = re.compile(
    r"context_length_exceeded|maximum context length|context length exceeded|"
    r"exceeds the context window|prompt is too long|input tokens exceed|"
    r"上下文长度|上下文超长|超出最大长度|超过最大长度|超出上下文|超过上下文",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ProviderFailure:
    code: ProviderErrorCode
    # A short, user-presentable description; never includes credentials or request bodies.
    message: str

    def of_model(self, model: str) -> ProviderFailure:
        """The failure as a turn reports it: naming the model whose provider failed."""
        return replace(self, message=f"Model {model!r}: {self.message}")


def _error_text(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        return " ".join(str(body.get(key) or "") for key in ("message", "code", "type"))
    return f"{exc.message} {body if isinstance(body, str) else ''}"


def is_context_overflow(exc: BaseException) -> bool:
    """True only for a real context-length error from the provider."""
    if isinstance(exc, ContextOverflowError):
        return True
    if not isinstance(exc, openai.APIError):
        return False
    if isinstance(exc, openai.APIStatusError) and exc.status_code == 413:
        return True
    if exc.code == "context_length_exceeded":
        return True
    return bool(_OVERFLOW_PATTERN.search(_error_text(exc)))


def classify_provider_error(exc: BaseException) -> ProviderFailure | None:
    """The failure code for a provider exception, or None when `exc` is not a provider failure
    (a bug of ours must surface as such, not as a provider error)."""
    if is_context_overflow(exc):
        return ProviderFailure("context_overflow", "The conversation no longer fits the model's context.")
    # The openai client wraps transport timeouts and connection failures (also mid-stream).
    if isinstance(exc, openai.APITimeoutError | asyncio.TimeoutError):
        return ProviderFailure("provider_timeout", "The model provider did not answer in time.")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in (401, 403):
            return ProviderFailure(
                "provider_auth", f"The model provider rejected the credentials ({status})."
            )
        if status == 429:
            return ProviderFailure("provider_rate_limited", "The model provider is rate limiting requests.")
        if status >= 500:
            return ProviderFailure("provider_unavailable", f"The model provider failed ({status}).")
        return ProviderFailure("provider_bad_request", f"The model provider refused the request ({status}).")
    if isinstance(exc, openai.APIConnectionError):
        return ProviderFailure("provider_unavailable", "The model provider cannot be reached.")
    if isinstance(exc, openai.APIError):
        # An error object inside a 200 stream: no status code, the body says what happened.
        return ProviderFailure("provider_stream_error", f"The model provider's stream failed: {exc.message}")
    if isinstance(exc, json.JSONDecodeError):
        return ProviderFailure("provider_stream_error", "The model provider sent a malformed stream.")
    return None
