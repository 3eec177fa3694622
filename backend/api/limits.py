"""A request-body size limit applied before any handler reads the body."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.services.decimals import ascii_decimal


class BodySizeLimit:
    """Answers 413 with a JSON error when a body exceeds `max_bytes` (declared or streamed).

    Paths under `exempt_prefixes` (uploads) enforce their own, larger limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, exempt_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.exempt_prefixes = exempt_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.exempt_prefixes):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            length = ascii_decimal(declared.decode("latin-1"))
            if length is None:
                await _answer(send, 400, "bad_request", "Content-Length must be a decimal byte count")
                return
            if length > self.max_bytes:
                await self._reject(send)
                return
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not response_started:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        await _answer(send, 413, "request_too_large", f"request body is larger than {self.max_bytes} bytes")


async def _answer(send: Send, status: int, code: str, message: str) -> None:
    """An error in the API's JSON shape, sent before the app sees the request."""
    body = json.dumps({"code": code, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _TooLarge(HTTPException):
    """An HTTPException so FastAPI's body parsing re-raises it instead of answering 400."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body is larger than {max_bytes} bytes")
