"""Stopping an attempt's graph stream when the turn is cancelled, with one task per attempt.

The turn's events are an async generator over the graph stream, iterated by the caller's own
task. While that task awaits the graph (the provider, a tool, the guard's summarizer) only a
cancellation can stop it, so one watcher task waits on the turn's `cancel` and cancels the
iterating task, but only while it is inside that await (`awaiting`). While the caller handles
an event, the generator is suspended at a `yield`: the watcher leaves it alone, and the
generator sees `cancel` itself when it resumes. Nothing is created per streamed item.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

T = TypeVar("T")


class CancelWatch:
    def __init__(self, cancel: asyncio.Event) -> None:
        self._cancel = cancel
        # The task awaiting the graph right now, if any.
        self._awaiting: asyncio.Task[Any] | None = None
        self._fired = False

    async def watch(self) -> None:
        """The watcher: run it for the extent of the stream (`chat_shell.tasks.running`)."""
        await self._cancel.wait()
        task = self._awaiting
        if task is not None:
            self._fired = True
            task.cancel()

    @property
    def requested(self) -> bool:
        return self._cancel.is_set()

    async def next(self, stream: AsyncIterator[T]) -> T:
        """The stream's next item: the one await the watcher may interrupt."""
        self._awaiting = asyncio.current_task()
        try:
            return await anext(stream)
        finally:
            self._awaiting = None

    def stopped(self) -> bool:
        """Whether the exception being handled came from this watch stopping the stream. Its
        cancellation is then withdrawn, so the task goes on to end the turn; a cancellation of
        the task by anyone else stays in force (and this returns False)."""
        if not self._fired:
            return False
        task = asyncio.current_task()
        assert task is not None
        if task.cancelling():
            task.uncancel()
        return not task.cancelling()
