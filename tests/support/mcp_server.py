"""A real MCP server for tests, written with the `mcp` SDK (FastMCP), over stdio or streamable HTTP.

    python -m tests.support.mcp_server stdio
    python -m tests.support.mcp_server http --port 8931

Tools:
- `logs(chars, offset)`: `chars` characters of deterministic log lines from line `offset` on
  (200,000 by default), the way a log server pages its output.
- `hang()`: never answers (until the call is cancelled).
- `explode()`: raises, so the SDK answers with an error result.
- `crash()`: the server process exits in the middle of the call.
- `noise()`: answers with audio content, which the adapter cannot convert (malformed for us).
- `echo(text)`: answers `text` (a small tool that shows the server works).
- `snapshot()`: a line of text and a 1x1 PNG (image content); `broken_snapshot()`: a line of
  text, an "image" whose data is not base64 and one whose type is not an image.
- `header(name)`: the value of the HTTP request header `name` (streamable HTTP only).
- `touch(path)`: appends a line to the file `path` and answers how many lines it holds (so a
  test sees how often the tool really ran).
- `grow()`: adds a tool `added_N` and tells the client that the tool list changed.
`--tools N` adds N small tools `tool_000`... (a server with a large tool list, for the benchmark).
`--started FILE` writes the process id to FILE once the server is up (tests wait for it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import AudioContent, ImageContent, TextContent

LOG_CHARS = 200_000
# A 1x1 PNG (the same bytes as `tests.support.files.PNG_1X1`).
PNG_1X1_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABpfZFQAAAAABJRU5ErkJggg=="
)


def log_text(chars: int = LOG_CHARS, offset: int = 0) -> str:
    """`chars` characters of log lines, starting at line `offset` (the same text every time)."""
    lines: list[str] = []
    size = 0
    index = offset
    while size < chars:
        stamp = f"2026-12-01T10:{index // 60 % 60:02d}:{index % 60:02d}Z"
        line = f"{stamp} worker-{index % 7} INFO request {index} ok"
        lines.append(line)
        size += len(line) + 1
        index += 1
    return "\n".join(lines)[:chars]


def build_server(extra_tools: int = 0, *, port: int = 8000) -> FastMCP:
    server = FastMCP("test-tools", host="127.0.0.1", port=port, log_level="WARNING")

    @server.tool()
    async def logs(chars: int = LOG_CHARS, offset: int = 0) -> str:
        """Read the service logs: `chars` characters starting at line `offset`."""
        return log_text(chars, offset)

    @server.tool()
    async def hang() -> str:
        """Wait for a result that never comes."""
        await asyncio.Event().wait()
        return "never"

    @server.tool()
    async def explode() -> str:
        """Fail with an error."""
        raise RuntimeError("the disk is on fire")

    @server.tool()
    async def crash() -> str:
        """Stop the server in the middle of the call."""
        os._exit(3)

    @server.tool()
    async def noise() -> AudioContent:
        """Answer with audio (content a text-only client cannot take)."""
        return AudioContent(type="audio", data="UklGRg==", mimeType="audio/wav")

    @server.tool()
    async def echo(text: str) -> str:
        """Say `text` back."""
        return text

    @server.tool()
    async def snapshot() -> list[TextContent | ImageContent]:
        """A screenshot of the dashboard."""
        return [
            TextContent(type="text", text="dashboard at 10:00"),
            ImageContent(type="image", data=PNG_1X1_BASE64, mimeType="image/png"),
        ]

    @server.tool()
    async def broken_snapshot() -> list[TextContent | ImageContent]:
        """A screenshot that went wrong."""
        return [
            TextContent(type="text", text="dashboard at 10:05"),
            ImageContent(type="image", data="not base64 at all!", mimeType="image/png"),
            ImageContent(type="image", data=PNG_1X1_BASE64, mimeType="text/html"),
        ]

    @server.tool()
    async def header(name: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """The value of an HTTP header of this request."""
        request = ctx.request_context.request
        return request.headers.get(name, "") if request is not None else ""

    @server.tool()
    def touch(path: str) -> str:
        """Mark a file once more."""
        marks = Path(path)
        with marks.open("a", encoding="utf-8") as out:
            out.write("ran\n")
        return f"{len(marks.read_text(encoding='utf-8').splitlines())} run(s)"

    @server.tool()
    async def grow(ctx: Context) -> str:  # type: ignore[type-arg]
        """Add a tool."""
        name = f"added_{len(server._tool_manager.list_tools())}"
        server.add_tool(_numbered_tool(0), name=name, description="An added tool.")
        await ctx.session.send_tool_list_changed()
        return name

    for number in range(extra_tools):
        server.add_tool(
            _numbered_tool(number),
            name=f"tool_{number:03d}",
            description=f"Look up record kind {number}: give an id and optionally a field and a limit.",
        )
    return server


def _numbered_tool(number: int):  # type: ignore[no-untyped-def]
    async def lookup(record_id: str, field: str = "all", limit: int = 10) -> str:
        return f"{number}:{record_id}:{field}:{limit}"

    return lookup


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=("stdio", "http"))
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--started", default=None)
    options = parser.parse_args(argv)
    server = build_server(options.tools, port=options.port)
    if options.started:
        with open(options.started, "w") as marker:
            marker.write(str(os.getpid()))
    server.run("stdio" if options.transport == "stdio" else "streamable-http")


if __name__ == "__main__":
    main(sys.argv[1:])
