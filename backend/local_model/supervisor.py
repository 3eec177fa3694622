"""Runs the local model server as a supervised child process on a loopback port.

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
import ctypes
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_COMMAND = (sys.executable, "-m", "backend.local_model.server_process")
_LOG_TAIL_LINES = 12
_PR_SET_PDEATHSIG = 1
# How long a failed request waits for the server's exit to be seen before calling it a crash.
_EXIT_GRACE_SECONDS = 2.0
_RELAUNCH_PAUSE_SECONDS = 1.0

# Generation uses every core but one, left to the service (streaming, storage): llama.cpp's
# threads wait for each other at every token and slow down badly when a core is taken away.
# Reading the prompt comes in large batches while the service waits, so it uses every core.
_THREADS = max(1, (os.cpu_count() or 1) - 1)
_BATCH_THREADS = os.cpu_count() or 1

State = Literal["starting", "ready", "restarting", "failed"]
_CODES: dict[State, str] = {
    "starting": "local_model_starting",
    "restarting": "local_model_starting",
    "ready": "local_model_ready",
    "failed": "local_model_failed",
}


class LocalModelError(RuntimeError):
    """The local model server cannot run; the message says why and where its log is."""


@dataclass(frozen=True)
class LocalModelStatus:
    state: State
    model_id: str
    log_path: Path
    reason: str | None = None

    @property
    def code(self) -> str:
        return _CODES[self.state]

    @property
    def message(self) -> str:
        name = f"The local model ({self.model_id})"
        if self.state == "starting":
            return f"{name} is starting…"
        if self.state == "restarting":
            return f"{name} stopped ({self.reason}) and is restarting…"
        if self.state == "failed":
            return f"{name} failed: {self.reason}. Its log is {self.log_path}."
        return f"{name} is ready."

    def as_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "code": self.code,
            "model": self.model_id,
            "message": self.message,
            "reason": self.reason,
            "log_path": str(self.log_path),
        }


@dataclass(frozen=True)
class ServerOptions:
    model_file: Path
    model_id: str
    log_path: Path
    context_window: int = 4096
    preferred_port: int | None = None
    # A taken preferred port is an error instead of a reason to pick another (a fixed address).
    fixed_port: bool = False
    host: str = HOST
    # The program serving the file, given llama-server's options (see `server_command`).
    command: tuple[str, ...] = DEFAULT_COMMAND
    startup_timeout_seconds: float = 120.0
    max_restarts: int = 3
    crash_window_seconds: float = 600.0


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on `port`: servers bind with SO_REUSEADDR, so connections
    of an earlier server left in TIME_WAIT do not count, only a listener does."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = HOST) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use_error(port: int, host: str, what: str) -> str:
    return f"Port {port} on {host} is in use by another program: stop it, or {what}."


def server_command(options: ServerOptions, port: int) -> list[str]:
    return [
        *options.command,
        *("--model", str(options.model_file), "--alias", options.model_id),
        *("--ctx-size", str(options.context_window)),
        *("--threads", str(_THREADS), "--threads-batch", str(_BATCH_THREADS)),
        *("--host", options.host, "--port", str(port)),
    ]


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when the service process dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class _LaunchFailed(Exception):
    def __init__(self, reason: str, *, port_taken: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.port_taken = port_taken


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
        path = self.options.log_path
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(lines[-_LOG_TAIL_LINES:])

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

    async def _spawn(self) -> asyncio.subprocess.Process:
        with self.options.log_path.open("ab") as log_file:
            return await asyncio.create_subprocess_exec(
                *server_command(self.options, self.port),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                # Its own session: a Ctrl-C (or a signal to the service's process group) reaches
                # the service, which stops the server; the server alone would look like a crash.
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    async def _exit_code(self, process: asyncio.subprocess.Process, wait: float) -> int | None:
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(process.wait()), wait)
        return None

    async def _wait_listening(self, process: asyncio.subprocess.Process, deadline: float) -> None:
        """Until `/health` answers 200 (llama.cpp answers 503 while it loads the model)."""
        root = self.base_url.removesuffix("/v1")
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if process.returncode is not None:
                    taken = "couldn't bind" in self.log_tail()
                    raise _LaunchFailed(
                        f"the server exited during startup ({describe_exit(process.returncode)})",
                        port_taken=taken,
                    )
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{root}/health")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise _LaunchFailed(
            f"the server did not become ready within {self.options.startup_timeout_seconds:.0f} s"
        )

    async def _first_decode(self, process: asyncio.subprocess.Process, deadline: float) -> None:
        """A real decode of a few tokens: loading a model proves less than answering."""
        body = {
            "model": self.options.model_id,
            # A short system message replaces the chat template's default one: fewer tokens to read.
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Ready?"}],
            "max_tokens": 4,
            "temperature": 0,
        }
        timeout = max(1.0, deadline - time.monotonic())
        try:
            async with httpx.AsyncClient(timeout=timeout) as client:
                response = await client.post(f"{self.base_url}/chat/completions", json=body)
        except httpx.HTTPError as exc:
            code = await self._exit_code(process, _EXIT_GRACE_SECONDS)
            if code is not None:
                raise _LaunchFailed(
                    f"the server crashed on its first decode, {describe_exit(code)}"
                ) from None
            raise _LaunchFailed(f"the server's first decode failed ({type(exc).__name__})") from None
        if response.status_code != 200:
            raise _LaunchFailed(
                f"the server's first decode failed (HTTP {response.status_code}: {response.text[:200]})"
            )
        answer = response.json()
        tokens = (answer.get("usage") or {}).get("completion_tokens") or 0
        choices = answer.get("choices") or [{}]
        if tokens < 1 and not (choices[0].get("message") or {}).get("content"):
            raise _LaunchFailed("the server's first decode returned no tokens")

    async def _launch(self, *, may_move: bool) -> None:
        """Start a server and verify it answers. On first start a port taken in the meantime
        is replaced (unless fixed); a restart keeps its port, which the runtime points at."""
        deadline = time.monotonic() + self.options.startup_timeout_seconds
        may_move = may_move and not self.options.fixed_port
        for _ in range(3):
            if may_move and not port_is_free(self.port, self.options.host):
                self.port = free_port(self.options.host)
            process = await self._spawn()
            self._process = process
            self._spawned.set()
            try:
                await self._wait_listening(process, deadline)
                await self._first_decode(process, deadline)
                return
            except _LaunchFailed as exc:
                await self._terminate(process)
                if exc.port_taken and may_move:
                    continue
                if exc.port_taken:
                    raise _LaunchFailed(port_in_use_error(self.port, self.options.host, "free it")) from None
                raise
        raise _LaunchFailed("the server could not bind a loopback port")

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
            except _LaunchFailed as exc:
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
        if self.exits == exits and (
            process is None or await self._exit_code(process, _EXIT_GRACE_SECONDS) is None
        ):
            return False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_EXIT_GRACE_SECONDS):
                while self.exits == exits and not self._stopping:
                    await self.changed()
        return True

    @staticmethod
    async def _terminate(process: asyncio.subprocess.Process) -> None:
        if process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._process is not None:
            await self._terminate(self._process)
