"""Runs the local model server (`python -m llama_cpp.server`) as a child process.

The server listens on a free loopback port (the preferred one when it is free, else another),
is healthy once `GET /v1/models` answers (llama_cpp loads the model before it binds), is
restarted when it dies (a crash fails the turn in flight; the next turn finds it running
again) and is stopped with the service. A server that cannot start, or crashes again right
after each restart, is reported with the end of its log.
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

import httpx

from chat_shell.providers.profiles import LOCAL_MODEL_NAME

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
# Restarts allowed within `_CRASH_WINDOW_SECONDS` before the supervisor gives up.
_MAX_RESTARTS = 5
_CRASH_WINDOW_SECONDS = 60.0
_LOG_TAIL_LINES = 12
_PR_SET_PDEATHSIG = 1


class LocalModelError(RuntimeError):
    """The local model server cannot run; the message says why and what to do."""


# One core is left to the service (streaming, storage, the tests' own client): llama.cpp's
# threads wait for each other at every step and slow down badly when a core is taken away.
# Measured at 2.8k tokens of context with both cores busy: generation 3.7 tokens/s with 2
# threads, 40 with 1; prompt evaluation 41 tokens/s with 2 threads, 93 with 1.
_THREADS = max(1, (os.cpu_count() or 1) - 1)


@dataclass(frozen=True)
class ServerOptions:
    model_file: Path
    log_path: Path
    context_window: int = 4096
    preferred_port: int | None = None
    startup_timeout_seconds: float = 120.0


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on `port`: uvicorn binds with SO_REUSEADDR, so connections
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


def choose_port(preferred: int | None) -> int:
    """The preferred port when nothing listens there, else any free loopback port."""
    if preferred is not None:
        if port_is_free(preferred):
            return preferred
        log.warning("local model: port %s is taken, using another free port", preferred)
    return free_port()


def server_command(options: ServerOptions, port: int, host: str = HOST) -> list[str]:
    return [
        *(sys.executable, "-m", "llama_cpp.server"),
        *("--model", str(options.model_file), "--model_alias", LOCAL_MODEL_NAME),
        *("--n_ctx", str(options.context_window), "--n_threads", str(_THREADS)),
        *("--n_threads_batch", str(_THREADS)),
        *("--host", host, "--port", str(port)),
    ]


def server_env() -> dict[str, str]:
    """This process's environment without HOST and PORT, which llama_cpp.server would prefer
    over its --host and --port arguments."""
    return {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT")}


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when the service process dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class LocalModelServer:
    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        options.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.port = choose_port(options.preferred_port)
        self._process: asyncio.subprocess.Process | None = None
        self._healthy = asyncio.Event()
        self._failure: LocalModelError | None = None
        self._watch: asyncio.Task[None] | None = None
        self._restarts: deque[float] = deque(maxlen=_MAX_RESTARTS)
        self.restart_count = 0

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _log_tail(self) -> str:
        path = self.options.log_path
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(lines[-_LOG_TAIL_LINES:])

    async def _spawn(self) -> asyncio.subprocess.Process:
        with self.options.log_path.open("ab") as log_file:
            return await asyncio.create_subprocess_exec(
                *server_command(self.options, self.port),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=server_env(),
                preexec_fn=_die_with_parent,
            )

    async def _wait_healthy(self, process: asyncio.subprocess.Process) -> None:
        deadline = time.monotonic() + self.options.startup_timeout_seconds
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if process.returncode is not None:
                    raise LocalModelError(
                        f"The local model server exited during startup (code {process.returncode}). "
                        f"If the model file is damaged, run `chat-shell local-model install --force`; "
                        f"log {self.options.log_path}:\n{self._log_tail()}"
                    )
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{self.base_url}/models")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise LocalModelError(
            f"The local model server did not become healthy within "
            f"{self.options.startup_timeout_seconds:.0f} s; log {self.options.log_path}:\n{self._log_tail()}"
        )

    async def _launch(self, *, may_move: bool) -> None:
        """Start a server and wait until it answers. On first start a port taken in the meantime
        is replaced; a restart keeps its port, which the runtime's provider URL points at."""
        for _ in range(3):
            if may_move and not port_is_free(self.port):
                self.port = choose_port(None)
            process = await self._spawn()
            self._process = process
            try:
                await self._wait_healthy(process)
                return
            except LocalModelError:
                await self._terminate(process)
                if not may_move or "address already in use" not in self._log_tail().lower():
                    raise
        raise LocalModelError("The local model server could not bind a loopback port.")

    async def start(self) -> None:
        started = time.monotonic()
        await self._launch(may_move=True)
        self._healthy.set()
        self._watch = asyncio.create_task(self._supervise(), name="local-model-supervisor")
        log.info(
            "local model: %s serving %s at %s (ready in %.1f s)",
            LOCAL_MODEL_NAME,
            self.options.model_file.name,
            self.base_url,
            time.monotonic() - started,
        )

    async def _supervise(self) -> None:
        """Restart the server whenever it dies, until it crashes too often."""
        while True:
            process = self._process
            assert process is not None
            code = await process.wait()
            self._healthy.clear()
            now = time.monotonic()
            self._restarts.append(now)
            if len(self._restarts) == _MAX_RESTARTS and now - self._restarts[0] < _CRASH_WINDOW_SECONDS:
                self._failure = LocalModelError(
                    f"The local model server crashed {_MAX_RESTARTS} times within "
                    f"{_CRASH_WINDOW_SECONDS:.0f} s and is not restarted again; "
                    f"log {self.options.log_path}:\n{self._log_tail()}"
                )
                log.error("%s", self._failure)
                self._healthy.set()
                return
            log.warning("local model: server exited (code %s); restarting it", code)
            try:
                await self._launch(may_move=False)
            except LocalModelError as exc:
                self._failure = exc
                log.error("%s", exc)
                self._healthy.set()
                return
            self.restart_count += 1
            self._healthy.set()
            log.info("local model: restarted at %s", self.base_url)

    async def _accepts_connections(self) -> bool:
        try:
            _, writer = await asyncio.open_connection(HOST, self.port)
        except OSError:
            return False
        writer.close()
        return True

    async def ready(self) -> None:
        """Wait until the server answers (a restart in progress included). A server that died
        a moment ago may not be reaped yet, so a refused connection means "wait", not "ready"."""
        async with asyncio.timeout(self.options.startup_timeout_seconds):
            while True:
                await self._healthy.wait()
                if self._failure is not None:
                    raise self._failure
                if await self._accepts_connections():
                    return
                await asyncio.sleep(0.05)

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
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._process is not None:
            await self._terminate(self._process)
