"""The watchdog of one summary compaction: heartbeats and the per-call backstop (SPEC 5.3)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any


class Watchdog:
    """One task per compaction: the `in_progress` heartbeat every few seconds, and the backstop
    of each summarizer call (what `asyncio.wait_for` does, without a timer per call: a long
    history makes hundreds of chunk calls). A call past its deadline is cancelled and becomes
    `TimeoutError`."""

    def __init__(self, timeout: float, heartbeat: float, beat: Callable[[], None]) -> None:
        self.timeout = timeout
        self._heartbeat = heartbeat
        self._beat = beat
        self.deadline: float | None = None
        self.fired = False
        # The compaction's task: made in it, the watchdog cancels it at a call's deadline.
        self.task: asyncio.Task[Any] | None = asyncio.current_task()

    async def run(self) -> None:
        """Heartbeats and deadlines: run it for the extent of the compaction
        (`chat_shell.tasks.running`)."""
        loop = asyncio.get_running_loop()
        next_beat = loop.time() + self._heartbeat
        while True:
            now = loop.time()
            deadline = self.deadline
            if deadline is not None and now >= deadline:
                self.fired = True
                assert self.task is not None
                self.task.cancel()
                return
            if now >= next_beat:
                self._beat()
                next_beat = now + self._heartbeat
            # Without a call running, wake within one timeout so a call started meanwhile is
            # never overrun by more than its own deadline.
            wake = min(next_beat, deadline if deadline is not None else now + self.timeout)
            await asyncio.sleep(max(0.0, wake - now))

    def call(self) -> CallDeadline:
        """`with watchdog.call(): await ...`: the deadline of one summarizer call."""
        return self._call_deadline

    @functools.cached_property
    def _call_deadline(self) -> CallDeadline:
        return CallDeadline(self)


class CallDeadline:
    """A plain context manager (no coroutine, no timer) around one summarizer call."""

    def __init__(self, watchdog: Watchdog) -> None:
        self._watchdog = watchdog
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> None:
        watchdog = self._watchdog
        watchdog.deadline = self._loop.time() + watchdog.timeout

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: object) -> None:
        watchdog = self._watchdog
        watchdog.deadline = None
        if kind is asyncio.CancelledError and watchdog.fired:
            assert watchdog.task is not None
            watchdog.task.uncancel()
            raise TimeoutError("the summarizer call passed its deadline") from exc
