"""A uvicorn server in a background thread, for synchronous tests (schemathesis, browsers)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from tests.support.servers import free_port


@contextmanager
def serve_in_thread(app: ASGIApp) -> Iterator[str]:
    port = free_port()
    # Proxy headers off, as `chat-shell serve` runs: the app alone decides whom to trust.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", proxy_headers=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server failed to start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
