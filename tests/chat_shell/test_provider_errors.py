"""Provider failures are classified from what a real OpenAI client raises over HTTP."""

from __future__ import annotations

import pytest
from langchain_openai import ChatOpenAI

from chat_shell.providers.errors import classify_provider_error, is_context_overflow
from chat_shell.providers.openai import ProviderConfig, create_chat_model
from chat_shell.providers.profiles import resolve_profile
from tests.support.scripted_provider import Reply, ScriptedProvider, http_error, text
from tests.support.servers import free_port


def _model(base_url: str, *, timeout: float = 10.0) -> ChatOpenAI:
    config = ProviderConfig(base_url=base_url, api_key="k", timeout_seconds=timeout, max_retries=0)
    return create_chat_model(resolve_profile("gpt-4o", max_output_tokens=64), config)


async def _raised(model: ChatOpenAI, streaming: bool) -> BaseException:
    try:
        if streaming:
            async for _ in model.astream("hello"):
                pass
        else:
            await model.ainvoke("hello")
    except Exception as exc:
        return exc
    raise AssertionError("the provider call did not fail")


def _chinese_overflow() -> Reply:
    return Reply(
        status=400,
        error_body={
            "error": {"message": "输入超出最大长度限制，请缩短上下文", "type": "invalid_request_error"}
        },
    )


CASES = [
    pytest.param(http_error(413), "context_overflow", id="413-json"),
    pytest.param(http_error(413, html=True), "context_overflow", id="413-html"),
    pytest.param(
        http_error(400, message="This model's maximum context length is 8192 tokens."),
        "context_overflow",
        id="400-message-without-code",
    ),
    pytest.param(
        http_error(400, message="prompt is too long: 210000 tokens"), "context_overflow", id="prompt-long"
    ),
    pytest.param(_chinese_overflow(), "context_overflow", id="400-chinese"),
    pytest.param(
        http_error(400, message="Invalid value for 'temperature'"), "provider_bad_request", id="bare-400"
    ),
    pytest.param(http_error(401), "provider_auth", id="401"),
    pytest.param(http_error(403), "provider_auth", id="403"),
    pytest.param(http_error(429), "provider_rate_limited", id="429"),
    pytest.param(http_error(500), "provider_unavailable", id="500"),
    pytest.param(http_error(503, html=True), "provider_unavailable", id="503-html"),
]


@pytest.mark.parametrize("streaming", [True, False], ids=["astream", "ainvoke"])
@pytest.mark.parametrize(("reply", "code"), CASES)
async def test_http_errors_classify_alike_streaming_or_not(
    scripted_provider: ScriptedProvider, streaming: bool, reply: Reply, code: str
) -> None:
    scripted_provider.script(reply)
    exc = await _raised(_model(scripted_provider.base_url), streaming)
    failure = classify_provider_error(exc)
    assert failure is not None and failure.code == code
    assert is_context_overflow(exc) == (code == "context_overflow")


@pytest.mark.parametrize("streaming", [True, False], ids=["astream", "ainvoke"])
async def test_real_context_length_exceeded_body_is_an_overflow(
    scripted_provider: ScriptedProvider, streaming: bool
) -> None:
    scripted_provider.context_window = 50
    scripted_provider.script(text("never sent"))
    exc = await _raised(_model(scripted_provider.base_url), streaming)
    assert getattr(exc, "code", None) == "context_length_exceeded"
    assert is_context_overflow(exc)
    assert classify_provider_error(exc).code == "context_overflow"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("fault", "code"), [("error_event", "provider_stream_error"), ("malformed", "provider_stream_error")]
)
async def test_faults_inside_a_stream(scripted_provider: ScriptedProvider, fault: str, code: str) -> None:
    scripted_provider.script(Reply(text="partial", stream_fault=fault))  # type: ignore[arg-type]
    exc = await _raised(_model(scripted_provider.base_url), streaming=True)
    failure = classify_provider_error(exc)
    assert failure is not None and failure.code == code
    assert not is_context_overflow(exc)


@pytest.mark.parametrize("streaming", [True, False], ids=["astream", "ainvoke"])
async def test_connection_refused_is_unavailable(streaming: bool) -> None:
    exc = await _raised(_model(f"http://127.0.0.1:{free_port()}/v1"), streaming)
    assert classify_provider_error(exc).code == "provider_unavailable"  # type: ignore[union-attr]


@pytest.mark.parametrize("streaming", [True, False], ids=["astream", "ainvoke"])
async def test_hang_past_the_timeout(scripted_provider: ScriptedProvider, streaming: bool) -> None:
    scripted_provider.script(Reply(text="some", hang=True))
    exc = await _raised(_model(scripted_provider.base_url, timeout=0.5), streaming)
    assert classify_provider_error(exc).code == "provider_timeout"  # type: ignore[union-attr]


def test_our_own_bugs_are_not_provider_failures() -> None:
    assert classify_provider_error(KeyError("messages")) is None
    assert not is_context_overflow(ValueError("maximum context length"))
