"""An SSE client for tests: reads a conversation's stream the way a browser would."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from chat_shell.contracts import TERMINAL_EVENT_TYPES


@dataclass(frozen=True)
class Received:
    id: str
    event: str
    data: dict[str, Any]

    @property
    def seq(self) -> int:
        return int(self.id.split(":")[1])


@dataclass
class StreamRead:
    status: int
    events: list[Received]

    @property
    def text(self) -> str:
        return "".join(e.data["text"] for e in self.events if e.event == "message.delta")

    @property
    def shown(self) -> str:
        """The reply as the page shows it: a restart replaced the text before it."""
        restarts = [n for n, e in enumerate(self.events) if e.event == "turn.restarted"]
        after = self.events[restarts[-1] + 1 :] if restarts else self.events
        return "".join(e.data["text"] for e in after if e.event == "message.delta")

    @property
    def terminal(self) -> Received | None:
        return self.events[-1] if self.events and self.events[-1].event in TERMINAL_EVENT_TYPES else None


async def read_stream(
    client: httpx.AsyncClient,
    conversation_id: int,
    *,
    last_event_id: str | None = None,
    after: int | None = None,
    turn_id: int | None = None,
    stop_after: int | None = None,
    until: Callable[[list[Received]], bool] | None = None,
) -> StreamRead:
    """Reads until the terminal event, or disconnects after `stop_after` events or once the
    events so far satisfy `until`."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    params: dict[str, int] = {}
    if after is not None:
        params["after"] = after
    if turn_id is not None:
        params["turn_id"] = turn_id
    events: list[Received] = []
    async with aconnect_sse(
        client, "GET", f"/api/conversations/{conversation_id}/stream", headers=headers, params=params
    ) as source:
        if source.response.status_code != 200:
            await source.response.aread()
            return StreamRead(source.response.status_code, events)
        async for sse in source.aiter_sse():
            if not sse.data:  # keep-alive comments
                continue
            events.append(Received(sse.id, sse.event, json.loads(sse.data)))
            if (
                sse.event in TERMINAL_EVENT_TYPES
                or (stop_after is not None and len(events) >= stop_after)
                or (until is not None and until(events))
            ):
                break
    return StreamRead(200, events)


def gapless(*reads: StreamRead) -> StreamRead:
    """A stream read and the reads that resumed it (each after the last event of the one
    before) as one; fails unless its events are numbered from 1 with no gap and no repeat."""
    events = [event for read in reads for event in read.events]
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), [e.id for e in events]
    return StreamRead(reads[-1].status, events)
