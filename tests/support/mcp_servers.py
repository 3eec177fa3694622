"""The test MCP server (`tests.support.mcp_server`) as the runtime's configuration sees it:
a stdio command, or a streamable HTTP server process on a free port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chat_shell.tools.mcp_config import StdioServer, StreamableHttpServer
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def stdio_server(*options: str, **fields: Any) -> StdioServer:
    return StdioServer(
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.support.mcp_server", "stdio", *options],
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
        **fields,
    )


def http_server_config(url: str, **fields: Any) -> StreamableHttpServer:
    return StreamableHttpServer(transport="streamable_http", url=url, **fields)


class HttpMcpProcess:
    """The test server over streamable HTTP, in its own process (so it can exit mid-call)."""

    def __init__(self, *options: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, timeout: float = 30.0) -> HttpMcpProcess:
        command = [sys.executable, "-m", "tests.support.mcp_server", "http", "--port", str(self.port)]
        self.process = subprocess.Popen([*command, *self.options], cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the MCP test server exited with {self.process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return self
            time.sleep(0.05)
        raise RuntimeError("the MCP test server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None


@contextlib.contextmanager
def http_mcp_server(*options: str) -> Iterator[HttpMcpProcess]:
    server = HttpMcpProcess(*options).start()
    try:
        yield server
    finally:
        server.stop()
