"""Runs the local model server as a supervised child process on a loopback port (one
launch is `launch`'s), restarting it when it dies.

The server starts in the background, and `status` is the one account of it that the page,
`/readyz`, the send route, the turn errors and the log all read:

- `starting` until the server listens *and* has decoded a few tokens for real. A server that
  loads its model but crashes or returns nothing on its first decode (as llama.cpp's AMX
  backend did on Q4 weights) is not ready, it is `failed`.
- `ready`; when the server dies it is `restarting` (the turn in flight fails with
  `local_model_failed`), at most `max_restarts` times within `crash_window_seconds`.
- `failed` when the first start goes wrong or the restarts run out: it stays stopped, with the
  reason and the log path, instead of crash-looping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque

from backend.local_model.launch import (
    EXIT_GRACE_SECONDS,
    LaunchFailed,
    ServerOptions,
    describe_exit,
    exit_code,
    first_decode,
    log_tail,
    spawn,
    terminate,
    wait_listening,
)
from backend.local_model.ports import HOST, free_port, port_in_use_error, port_is_free
from backend.local_model.status import LocalModelError, LocalModelStatus, State

log = logging.getLogger(__name__)

_RELAUNCH_PAUSE_SECONDS = 1.0


class LocalModelServer:
    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        options.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.port = self._first_port()
        self._process: asyncio.subprocess.Process | None = None
        self._status = LocalModelStatus("starting", options.model_id, options.log_path)
        self._changed = asyncio.Event()
        self._spawned = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._crashes: deque[float] = deque()
        self._stopping = False
        self.restart_count = 0
        # Server exits seen while it was serving, and how the last one went.
        self.exits = 0
        self.last_exit: str | None = None

    def _first_port(self) -> int:
        preferred, host = self.options.preferred_port, self.options.host
        if preferred is None:
            return free_port(host)
        if port_is_free(preferred, host):
            return preferred
        if self.options.fixed_port:
            raise LocalModelError(port_in_use_error(preferred, host, "choose another with --port"))
        log.warning("local model: port %s is taken, using another free port", preferred)
        return free_port(host)

    @property
    def status(self) -> LocalModelStatus:
        return self._status

    @property
    def base_url(self) -> str:
        host = HOST if self.options.host in ("0.0.0.0", "") else self.options.host
        return f"http://{host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def log_tail(self) -> str:
        return log_tail(self.options.log_path)

    def _set(self, state: State, reason: str | None = None) -> None:
        self._status = LocalModelStatus(state, self.options.model_id, self.options.log_path, reason)
        self._changed.set()
        self._changed = asyncio.Event()

    def _fail(self, reason: str) -> None:
        self._set("failed", reason)
        tail = self.log_tail()
        log.error("local model: %s\nlast lines of %s:\n%s", self._status.message, self.options.log_path, tail)

    # -- starting ------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the server in the background; `status` says how far it got."""
        log.info(
            "local model: starting %s (%s) on port %s; log %s",
            self.options.model_id,
            self.options.model_file,
            self.port,
            self.options.log_path,
        )
        self._task = asyncio.create_task(self._run(), name="local-model-supervisor")
        self._task.add_done_callback(lambda _: self._spawned.set())

    async def spawned(self) -> None:
        """Until the first server process exists (or the start ended): from then on the model
        loads in that process whatever this one does."""
        await self._spawned.wait()

    async def _launch(self, *, may_move: bool) -> None:
        """Start a server and verify it answers. On first start a port taken in the meantime
        is replaced (unless fixed); a restart keeps its port, which the runtime points at."""
        deadline = time.monotonic() + self.options.startup_timeout_seconds
        may_move = may_move and not self.options.fixed_port
        for _ in range(3):
            if may_move and not port_is_free(self.port, self.options.host):
                self.port = free_port(self.options.host)
            process = await spawn(self.options, self.port)
            self._process = process
            self._spawned.set()
            try:
                await wait_listening(process, self.options, self.base_url, deadline)
                await first_decode(process, self.options, self.base_url, deadline)
                return
            except LaunchFailed as exc:
                await terminate(process)
                if exc.port_taken and may_move:
                    continue
                if exc.port_taken:
                    raise LaunchFailed(port_in_use_error(self.port, self.options.host, "free it")) from None
                raise
        raise LaunchFailed("the server could not bind a loopback port")

    def _may_restart(self) -> bool:
        """Records a crash; False once they exceed `max_restarts` within the crash window."""
        now = time.monotonic()
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > self.options.crash_window_seconds:
            self._crashes.popleft()
        return len(self._crashes) <= self.options.max_restarts

    def _crash_loop(self, last: str) -> str:
        return (
            f"the server crashed {len(self._crashes)} times within "
            f"{self.options.crash_window_seconds:.0f} s and is not restarted again (last: {last})"
        )

    async def _run(self) -> None:
        started = time.monotonic()
        first = True
        while True:
            try:
                await self._launch(may_move=first)
            except LaunchFailed as exc:
                if first:
                    self._fail(exc.reason)
                    return
                if not self._may_restart():
                    self._fail(self._crash_loop(exc.reason))
                    return
                self._set("restarting", exc.reason)
                await asyncio.sleep(_RELAUNCH_PAUSE_SECONDS)
                continue
            self._set("ready")
            if first:
                log.info(
                    "local model: %s ready at %s in %.1f s",
                    self.options.model_id,
                    self.base_url,
                    time.monotonic() - started,
                )
            else:
                self.restart_count += 1
                log.info("local model: restarted at %s", self.base_url)
            first = False
            assert self._process is not None
            code = await self._process.wait()
            if self._stopping:
                return
            self.exits += 1
            self.last_exit = describe_exit(code)
            reason = f"the server exited, {self.last_exit}"
            if not self._may_restart():
                self._fail(self._crash_loop(reason))
                return
            log.warning(
                "local model: %s; restarting it (%s of %s restarts allowed within %.0f s)",
                reason,
                len(self._crashes),
                self.options.max_restarts,
                self.options.crash_window_seconds,
            )
            self._set("restarting", reason)

    # -- waiting and stopping -------------------------------------------------------------

    async def changed(self) -> LocalModelStatus:
        """The next status."""
        await self._changed.wait()
        return self._status

    async def settled(self) -> LocalModelStatus:
        """The status once the server is ready or has failed (a start or restart finished)."""
        while self._status.state in ("starting", "restarting"):
            await self.changed()
        return self._status

    async def ready(self) -> None:
        """Wait while the server starts or restarts; raise LocalModelError once it has failed."""
        async with asyncio.timeout(self.options.startup_timeout_seconds * 2):
            status = await self.settled()
        if status.state == "failed":
            raise LocalModelError(status.message)

    async def exited_since(self, exits: int) -> bool:
        """Whether the server died after `exits` exits had been seen: a server that stopped
        answering gets a moment to exit, and then the supervisor to take note (so `status`
        already says `restarting` or `failed` when this returns True)."""
        process = self._process
        if self.exits == exits and (process is None or await exit_code(process, EXIT_GRACE_SECONDS) is None):
            return False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(EXIT_GRACE_SECONDS):
                while self.exits == exits and not self._stopping:
                    await self.changed()
        return True

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._process is not None:
            await terminate(self._process)
