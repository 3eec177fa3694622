"""Service mode: chat_shell as its own FastAPI app (SPEC 6.4).

`POST /v1/response` takes a `TurnRequest` and answers an SSE stream of the same `TurnEvent`
models package mode yields (`event:` = the event type, `data:` = its JSON).
`POST /v1/response/{turn_id}/cancel` stops a running turn;
`POST /v1/response/{turn_id}/approvals/{call_id}` (`{"allow": bool}`) decides an "ask first"
call it waits on (409 when that call is not waiting); `GET /healthz` is liveness.
Errors are JSON `{"code", "message"}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import Body, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from chat_shell.contracts import McpServerInfo, TitleRequest, TurnRequest, TurnRuntime


class ServiceError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def create_service_app(
    runtime: TurnRuntime,
    *,
    service_token: str | None = None,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if on_shutdown is not None:
                await on_shutdown()

    app = FastAPI(title="chat_shell", version="0.1.0", lifespan=lifespan)
    running: dict[int, asyncio.Event] = {}

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"code": exc.code, "message": exc.message}, status_code=exc.status)

    def require_token(request: Request) -> None:
        if service_token is None:
            return
        supplied = request.headers.get("authorization", "")
        if not hmac.compare_digest(supplied.encode(), f"Bearer {service_token}".encode()):
            raise ServiceError(401, "unauthorized", "a valid service token is required")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/response", response_model=None, dependencies=[Depends(require_token)])
    async def respond(turn: TurnRequest) -> Response:
        if turn.turn_id in running:
            raise ServiceError(409, "conflict", f"turn {turn.turn_id} is already running")
        cancel = asyncio.Event()

        async def events() -> AsyncIterator[ServerSentEvent]:
            running[turn.turn_id] = cancel
            try:
                # Closed here, not at garbage collection: a backend that hangs up stops the turn.
                async with contextlib.aclosing(runtime.run(turn, cancel)) as turn_events:
                    async for event in turn_events:
                        yield ServerSentEvent(event=event.type, data=event.model_dump_json())
            finally:
                running.pop(turn.turn_id, None)

        return EventSourceResponse(events())

    @app.get("/v1/mcp/servers", dependencies=[Depends(require_token)])
    async def mcp_servers() -> list[McpServerInfo]:
        return await runtime.mcp_servers()

    @app.post("/v1/titles", dependencies=[Depends(require_token)])
    async def write_title(request: TitleRequest) -> dict[str, str | None]:
        return {"title": await runtime.write_title(request)}

    @app.post("/v1/response/{turn_id}/cancel", dependencies=[Depends(require_token)])
    async def cancel_turn(turn_id: int) -> dict[str, bool]:
        cancel = running.get(turn_id)
        if cancel is None:
            raise ServiceError(404, "not_found", f"turn {turn_id} is not running")
        cancel.set()
        return {"cancelled": True}

    @app.post("/v1/response/{turn_id}/approvals/{call_id}", dependencies=[Depends(require_token)])
    async def decide(turn_id: int, call_id: str, allow: bool = Body(embed=True)) -> dict[str, bool]:
        if not await runtime.decide(turn_id, call_id, allow):
            raise ServiceError(409, "no_pending_approval", f"call {call_id} of turn {turn_id} is not waiting")
        return {"decided": True}

    return app
