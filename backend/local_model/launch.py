"""One local model server process: its options and command line, spawning it, waiting until it
listens, proving it decodes, and ending it. The restarts around it are the supervisor's."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from backend.local_model.ports import HOST

DEFAULT_COMMAND = (sys.executable, "-m", "backend.local_model.server_process")
_LOG_TAIL_LINES = 12
_PR_SET_PDEATHSIG = 1
# How long a failed request waits for the server's exit to be seen before calling it a crash.
EXIT_GRACE_SECONDS = 2.0

# Generation uses every core but one, left to the service (streaming, storage): llama.cpp's
# threads wait for each other at every token and slow down badly when a core is taken away.
# Reading the prompt comes in large batches while the service waits, so it uses every core.
_THREADS = max(1, (os.cpu_count() or 1) - 1)
_BATCH_THREADS = os.cpu_count() or 1


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


class LaunchFailed(Exception):
    def __init__(self, reason: str, *, port_taken: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.port_taken = port_taken


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


def log_tail(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-_LOG_TAIL_LINES:])


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when the service process dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


async def spawn(options: ServerOptions, port: int) -> asyncio.subprocess.Process:
    with options.log_path.open("ab") as log_file:
        return await asyncio.create_subprocess_exec(
            *server_command(options, port),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            # Its own session: a Ctrl-C (or a signal to the service's process group) reaches
            # the service, which stops the server; the server alone would look like a crash.
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


async def exit_code(process: asyncio.subprocess.Process, wait: float) -> int | None:
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(asyncio.shield(process.wait()), wait)
    return None


async def wait_listening(
    process: asyncio.subprocess.Process, options: ServerOptions, base_url: str, deadline: float
) -> None:
    """Until `/health` answers 200 (llama.cpp answers 503 while it loads the model)."""
    root = base_url.removesuffix("/v1")
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.returncode is not None:
                taken = "couldn't bind" in log_tail(options.log_path)
                raise LaunchFailed(
                    f"the server exited during startup ({describe_exit(process.returncode)})",
                    port_taken=taken,
                )
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(f"{root}/health")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise LaunchFailed(f"the server did not become ready within {options.startup_timeout_seconds:.0f} s")


async def first_decode(
    process: asyncio.subprocess.Process, options: ServerOptions, base_url: str, deadline: float
) -> None:
    """A real decode of a few tokens: loading a model proves less than answering."""
    body = {
        "model": options.model_id,
        # A short system message replaces the chat template's default one: fewer tokens to read.
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Ready?"}],
        "max_tokens": 4,
        "temperature": 0,
    }
    timeout = max(1.0, deadline - time.monotonic())
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.post(f"{base_url}/chat/completions", json=body)
    except httpx.HTTPError as exc:
        code = await exit_code(process, EXIT_GRACE_SECONDS)
        if code is not None:
            raise LaunchFailed(f"the server crashed on its first decode, {describe_exit(code)}") from None
        raise LaunchFailed(f"the server's first decode failed ({type(exc).__name__})") from None
    if response.status_code != 200:
        raise LaunchFailed(
            f"the server's first decode failed (HTTP {response.status_code}: {response.text[:200]})"
        )
    answer = response.json()
    tokens = (answer.get("usage") or {}).get("completion_tokens") or 0
    choices = answer.get("choices") or [{}]
    if tokens < 1 and not (choices[0].get("message") or {}).get("content"):
        raise LaunchFailed("the server's first decode returned no tokens")


async def terminate(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), 10)
    except TimeoutError:
        process.kill()
        await process.wait()
