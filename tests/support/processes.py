"""Backend processes for tests that need real process boundaries (crash, several replicas)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from tests.support.api import LOOPBACK_TLS, ROOMY_LIMITS
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
# Starts on a fresh port after the picked one was taken meanwhile.
BIND_ATTEMPTS = 3


class BackendProcess:
    """`chat-shell serve` in its own process, as an operator would run it."""

    def __init__(self, env: dict[str, str], log_path: Path, *args: str, launcher: Sequence[str] = ()) -> None:
        """`launcher` goes before the interpreter (a benchmark runs the process under valgrind)."""
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._env = {**os.environ, **env}
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._args = args
        self._launcher = tuple(launcher)

    def start(self, timeout: float = 180) -> BackendProcess:
        """Starts the process and waits until it is ready. A port picked free can be taken by
        another test's server before this process binds it: then it starts again on another."""
        for _ in range(BIND_ATTEMPTS):
            if self._start(timeout):
                return self
            self.port = free_port()
            self.base_url = f"http://127.0.0.1:{self.port}"
        raise RuntimeError(f"backend could not bind a port: {self._log_path.read_text()[-2000:]}")

    def _start(self, timeout: float) -> bool:
        """True once ready; False when it exited because its port was taken."""
        log = self._log_path.open("ab")
        written = log.tell()
        self._process = subprocess.Popen(
            [
                *self._launcher,
                sys.executable,
                "-m",
                "backend.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *self._args,
            ],
            cwd=ROOT,
            env=self._env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        # One client for the whole poll: a new one per request would load the CA bundle each time.
        with httpx.Client(verify=LOOPBACK_TLS, timeout=2) as http:
            while True:
                try:
                    if http.get(f"{self.base_url}/readyz").status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
                if self._process.poll() is not None:
                    output = self._log_path.read_bytes()[written:].decode(errors="replace")
                    # Taken before the CLI's own check of the port, or between that check and the bind.
                    if "is in use by another program" in output or "address already in use" in output:
                        return False
                    raise RuntimeError(f"backend exited during startup: {output[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError("backend did not become ready")
                time.sleep(0.1)

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def terminate(self) -> None:
        """SIGTERM, as an orchestrator's stop or a rolling restart sends it (no wait)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        assert self._process is not None
        return self._process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        assert self._process is not None
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(timeout=30)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=30)


class WorkerProcess(BackendProcess):
    """`chat-shell worker` in its own process: ready once it says it took the queue."""

    READY = b"worker started"

    def _start(self, timeout: float) -> bool:
        log = self._log_path.open("ab")
        written = log.tell()
        self._process = subprocess.Popen(
            [*self._launcher, sys.executable, "-m", "backend.cli", "worker", *self._args],
            cwd=ROOT,
            env=self._env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while self.READY not in self._log_path.read_bytes()[written:]:
            if self._process.poll() is not None:
                output = self._log_path.read_bytes()[written:].decode(errors="replace")
                raise RuntimeError(f"worker exited during startup: {output[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("worker did not start")
            time.sleep(0.1)
        return True


def backend_env(database_url: str, data_dir: Path, provider_url: str, **extra: str) -> dict[str, str]:
    return {
        "CHAT_SHELL_DATABASE_URL": database_url,
        "CHAT_SHELL_DATA_DIR": str(data_dir),
        "CHAT_SHELL_LOCAL_MODEL": "off",
        "CHAT_SHELL_TELEMETRY_ENABLED": "false",
        "CHAT_SHELL_SSE_PING_SECONDS": "1",
        "CHAT_SHELL_PASSWORD_HASH_PROFILE": "CHEAPEST",
        "OPENAI_BASE_URL": provider_url,
        "OPENAI_API_KEY": "test",
        # On PostgreSQL `serve` runs a worker of the queue too, unless the test says otherwise.
        "CHAT_SHELL_WORKER_IN_PROCESS": "true",
        **{f"CHAT_SHELL_{name.upper()}": str(value) for name, value in ROOMY_LIMITS.items()},
        **extra,
    }


def shared_env(
    postgres_url: str, data_dir: Path, provider_url: str, redis_url: str, **extra: str
) -> dict[str, str]:
    """The environment of backend processes that share an emptied PostgreSQL database and one Redis."""
    from tests.conftest import _off_loop
    from tests.support import databases

    _off_loop(lambda: databases.truncate_all(postgres_url))
    return backend_env(postgres_url, data_dir, provider_url, CHAT_SHELL_REDIS_URL=redis_url, **extra)


class Fleet:
    """The processes of one test, all on one database and one Redis; stopped at its end."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self._logs = logs
        self._started: list[BackendProcess] = []
        self._workers: dict[str, BackendProcess] = {}

    async def web(self, name: str, *args: str, **extra: str) -> BackendProcess:
        process = BackendProcess({**self.env, **extra}, self._logs / f"{name}.log", *args)
        self._started.append(process)
        return await asyncio.to_thread(process.start)

    async def worker(self, name: str, *args: str, **extra: str) -> BackendProcess:
        process = WorkerProcess({**self.env, **extra}, self._logs / f"{name}.log", *args)
        self._started.append(process)
        self._workers[name] = process
        return await asyncio.to_thread(process.start)

    async def workers(self, *names: str, **extra: str) -> list[BackendProcess]:
        return list(await asyncio.gather(*(self.worker(name, **extra) for name in names)))

    def running(self, turn_id: int) -> BackendProcess:
        """The live worker that took the turn (each logs the jobs it starts)."""
        taken = f"turn_id={turn_id})"
        for name, worker in self._workers.items():
            lines = self.log(name).splitlines()
            if worker.alive and any("Starting job run_turn" in line and taken in line for line in lines):
                return worker
        raise AssertionError(f"no live worker took turn {turn_id}")

    def log(self, name: str) -> str:
        return (self._logs / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for process in self._started:
            process.stop()


# What the `make_fleet` fixture gives (tests/backend/conftest.py): a test's Fleet, made with
# settings on top of the shared ones.
MakeFleet = Callable[..., Fleet]
