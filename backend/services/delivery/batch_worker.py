"""One background task that takes whatever has queued up since it last woke and handles it as
one batch: the event log's group commit and the Redis broker's outbox both work this way, so a
burst of events costs one write, not one per event."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class BatchWorker(Generic[Item]):
    """Queues items and hands each non-empty batch, in arrival order, to `process`.

    Items queued while `process` runs wait for the next batch; `stop` cancels the task without
    handling what is still queued.
    """

    def __init__(self, name: str, process: Callable[[list[Item]], Awaitable[None]]) -> None:
        self._name = name
        self._process = process
        self._queue: list[Item] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def add(self, items: Iterable[Item]) -> None:
        self._queue.extend(items)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._queue = self._queue, []
            if batch:
                await self._process(batch)
