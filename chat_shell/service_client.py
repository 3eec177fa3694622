"""`RemoteChatShell`: the backend's client of a chat_shell service (service mode, SPEC 6.4).

Same signature and same events as `ChatShell.run`. Cancelling calls the service's cancel
endpoint and reads on until the terminal event, so the partial output arrives as in package
mode. If the service cannot be reached or its stream breaks, the caller still gets a
well-formed ending: `turn.failed` with code `runtime_unavailable` and what it was shown so far
(the received events folded by `VisibleTurn`: text and tool blocks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator

import httpx
from httpx_sse import SSEError, aconnect_sse
from pydantic import TypeAdapter, ValidationError

from chat_shell import contracts
from chat_shell.events.fold import VisibleTurn

logger = logging.getLogger("chat_shell.service_client")
_EVENTS: TypeAdapter[contracts.TurnEvent] = TypeAdapter(contracts.TurnEvent)
_SERVERS: TypeAdapter[list[contracts.McpServerInfo]] = TypeAdapter(list[contracts.McpServerInfo])


class ServiceUnavailable(Exception):
    pass


class RemoteChatShell:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        connect_timeout: float = 10.0,
        # The service sends keep-alive comments every 15 s; this much silence means it is gone.
        idle_timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(connect_timeout, read=idle_timeout),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def mcp_servers(self) -> list[contracts.McpServerInfo]:
        try:
            response = await self._client.get("/v1/mcp/servers")
            response.raise_for_status()
            return _SERVERS.validate_python(response.json())
        except (httpx.HTTPError, ValidationError) as exc:
            raise ServiceUnavailable(f"the chat_shell service did not list its MCP servers: {exc}") from exc

    async def decide(self, turn_id: int, call_id: str, allow: bool) -> bool:
        try:
            response = await self._client.post(
                f"/v1/response/{turn_id}/approvals/{call_id}", json={"allow": allow}
            )
        except httpx.HTTPError as exc:
            raise ServiceUnavailable(f"the decision did not reach the chat_shell service: {exc}") from exc
        return response.status_code == 200

    async def write_title(self, request: contracts.TitleRequest) -> str | None:
        try:
            response = await self._client.post("/v1/titles", json=request.model_dump(mode="json"))
            response.raise_for_status()
            title = response.json().get("title")
        except (httpx.HTTPError, ValueError) as exc:
            logger.warning("no title from the chat_shell service for %s: %r", request.conversation_id, exc)
            return None
        return title if isinstance(title, str) else None

    async def run(
        self, request: contracts.TurnRequest, cancel: asyncio.Event | None = None
    ) -> AsyncGenerator[contracts.TurnEvent, None]:
        seen = VisibleTurn()
        started = False
        try:
            async with contextlib.aclosing(self._stream(request, cancel)) as events:
                async for event in events:
                    started = started or isinstance(event, contracts.TurnStarted)
                    seen.add(event)
                    yield event
                    if event.type in contracts.TERMINAL_EVENT_TYPES:
                        return
            problem = "the chat_shell service closed the stream before the turn ended"
        except (httpx.HTTPError, SSEError, ValidationError, ServiceUnavailable) as exc:
            logger.warning("chat_shell service failure for turn %s: %r", request.turn_id, exc)
            problem = f"the chat_shell service is unavailable ({type(exc).__name__})"
        if not started:
            yield contracts.TurnStarted(model=request.model or "", profile="")
        seen.end()
        yield contracts.TurnFailed(
            code="runtime_unavailable",
            message=problem,
            partial=seen.text,
            result=contracts.TurnResult(
                value=seen.text, blocks=seen.blocks, termination_reason="internal_error"
            ),
        )

    async def _stream(
        self, request: contracts.TurnRequest, cancel: asyncio.Event | None
    ) -> AsyncGenerator[contracts.TurnEvent, None]:
        body = request.model_dump(mode="json")
        canceller: asyncio.Task[None] | None = None
        try:
            async with aconnect_sse(self._client, "POST", "/v1/response", json=body) as source:
                if source.response.status_code != 200:
                    await source.response.aread()
                    raise ServiceUnavailable(
                        f"status {source.response.status_code}: {source.response.text[:200]}"
                    )
                if cancel is not None:
                    canceller = asyncio.create_task(self._cancel_when_set(cancel, request.turn_id))
                async for sse in source.aiter_sse():
                    yield _EVENTS.validate_json(sse.data)
        finally:
            if canceller is not None:
                canceller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await canceller

    async def _cancel_when_set(self, cancel: asyncio.Event, turn_id: int) -> None:
        await cancel.wait()
        try:
            response = await self._client.post(f"/v1/response/{turn_id}/cancel")
        except httpx.HTTPError as exc:
            logger.warning("cancel of turn %s did not reach the chat_shell service: %r", turn_id, exc)
            return
        if response.status_code not in (200, 404):
            logger.warning("cancel of turn %s answered %s", turn_id, response.status_code)
