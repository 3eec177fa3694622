"""Real HTTP servers for tests: uvicorn serving an ASGI app on a random loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
import uvicorn
from starlette.types import ASGIApp


@contextlib.contextmanager
def silent_tcp_server() -> Iterator[str]:
    """A TCP server that accepts connections (the kernel completes them) and never answers,
    like a hung Redis; yields its `host:port`."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=512)
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


@dataclass(frozen=True)
class PrivateRedis:
    url: str
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        """Gone for good when this returns: a send right after it cannot still reach the server."""
        self.process.kill()
        self.process.wait()


@contextlib.contextmanager
def private_redis_server(directory: Path) -> Iterator[PrivateRedis]:
    """A Redis of its own on a free port, keeping nothing on disk: a test can stop it mid-turn
    without touching anything else, and a benchmark measures on a quiet one."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is required (scripts/services.sh installs it)")
    port = free_port()
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*command, "--dir", str(directory)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield PrivateRedis(url, process)
    finally:
        process.kill()
        process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.asynccontextmanager
async def serve(app: ASGIApp, port: int | None = None) -> AsyncIterator[str]:
    """Run `app` in this event loop; yields its base URL and stops it (lifespan included) on exit."""
    port = port or free_port()
    # Proxy headers off, as `chat-shell serve` runs: the app alone decides whom to trust.
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", proxy_headers=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # surfaces a startup failure
            raise RuntimeError("server stopped during startup")
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
