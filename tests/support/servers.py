"""Real HTTP servers for tests: uvicorn serving an ASGI app on a random loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

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
