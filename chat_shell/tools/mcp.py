"""MCP servers' tools beside the built-in ones (`langchain-mcp-adapters` on the `mcp` SDK).

Each configured server has one supervisor task that holds its session: it connects, lists the
tools, keeps the session while pings answer, and reconnects after a pause when the server goes
away (down at start, exited, unreachable). A server is `connecting` until its first attempt
ends, then `available` or `unavailable`; the tools of an unavailable server are not offered,
and the other servers' tools keep working.

The LangChain tools are converted by the adapter once per tool list: they call through a
stand-in session that reaches whatever session the server holds now, so a reconnect does not
change them, and while the listed tools stay the same the tools, their schemas and the model
binding built from them are reused by every turn.

A call has the server's time limit. A call that times out, whose server went away, or whose
answer the adapter cannot convert raises, and the tool node turns the error into the tool
message the model sees, so the turn goes on. A stopped turn cancels its running call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import anyio
from langchain_core.tools import BaseTool, ToolException
from langchain_mcp_adapters.sessions import Connection, create_session
from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.types import CONNECTION_CLOSED, CallToolResult, ServerNotification, ToolListChangedNotification
from mcp.types import Tool as McpTool

from chat_shell.contracts import McpServerInfo, McpToolInfo
from chat_shell.observability import instruments
from chat_shell.tools.mcp_config import StdioServer, StreamableHttpServer, connection_for
from chat_shell.tools.registry import ToolSet, tool_schema

logger = logging.getLogger("chat_shell.mcp")

ServerStatus = Literal["connecting", "available", "unavailable"]
CallOutcome = Literal["ok", "error", "timeout", "unavailable", "cancelled"]
# The tool message metadata key under which a call's `CallRecord` travels to its tool event.
CALL_RECORD_KEY = "mcp_call"
# The tool metadata key that names a tool's MCP server (spans and metrics read it).
SERVER_KEY = "mcp_server"
_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
_NO_TOOLS = ToolSet((), ())
# How long `aclose` waits for the supervisor to end before cancelling it again.
CLOSE_RETRY_SECONDS = 1.0


@dataclass
class CallRecord:
    """How one MCP call ended, filled by the call itself (the operators' dashboard stores it)."""

    outcome: CallOutcome | None = None
    duration_ms: float | None = None


# A mutable record rather than a value: LangChain runs a tool in a copy of the caller's context,
# so the call can fill the caller's record but not set a variable the caller would see.
_recording: ContextVar[CallRecord | None] = ContextVar("mcp_call_record", default=None)


@contextlib.contextmanager
def recording() -> Iterator[CallRecord]:
    """The record of the MCP call made within (left empty when none was made)."""
    record = CallRecord()
    token = _recording.set(record)
    try:
        yield record
    finally:
        _recording.reset(token)


def server_of(tool: BaseTool) -> str | None:
    """The MCP server a tool belongs to (None for a built-in tool)."""
    return (tool.metadata or {}).get(SERVER_KEY)


class _LiveSession:
    """What the adapter's tools call: the server's session of the moment."""

    def __init__(self, server: McpServer) -> None:
        self._server = server

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **options: Any
    ) -> CallToolResult:
        return await self._server.call(name, arguments or {}, options.get("progress_callback"))


@dataclass
class _Listing:
    """One tool list of a server, converted once."""

    digest: str
    tools: tuple[BaseTool, ...]
    offered: ToolSet


class McpServer:
    def __init__(self, name: str, config: StreamableHttpServer | StdioServer) -> None:
        self.name = name
        self.config = config
        self._status: ServerStatus = "connecting"
        self._error: str | None = None
        self._session: ClientSession | None = None
        self._listing = _Listing("", (), _NO_TOOLS)
        self._live = _LiveSession(self)
        self._settled = asyncio.Event()
        self._lost = asyncio.Event()
        self._wake = asyncio.Event()
        self._changed = False
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    # -- state -----------------------------------------------------------------------------

    @property
    def status(self) -> ServerStatus:
        return self._status

    def info(self) -> McpServerInfo:
        return McpServerInfo(
            name=self.name,
            transport=self.config.transport,
            status=self._status,
            enabled_by_default=self.config.enabled_by_default,
            tools=[McpToolInfo(name=tool.name, description=tool.description) for tool in self._listing.tools],
            error=self._error,
        )

    def offered(self) -> ToolSet:
        """The server's tools as a turn offers them (none while it is unavailable)."""
        return self._listing.offered if self._status == "available" else _NO_TOOLS

    # -- the supervisor --------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")

    async def settled(self) -> None:
        """Wait (at most the connect timeout) for the first connection attempt to end."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.config.connect_timeout_seconds):
                await self._settled.wait()

    async def aclose(self) -> None:
        self._closing = True
        task, self._task = self._task, None
        # A cancel that lands while the SDK's stdio client is still starting can come out of it
        # as a broken stream rather than a cancellation, and be swallowed: cancel until it ends.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_RETRY_SECONDS)

    async def _supervise(self) -> None:
        while not self._closing:
            try:
                await self._serve()
            except Exception as exc:
                if self._closing:
                    return
                self._mark_unavailable(exc)
            self._settled.set()
            await asyncio.sleep(self.config.reconnect_seconds)

    async def _serve(self) -> None:
        connection = dict(connection_for(self.config))
        connection["session_kwargs"] = {"message_handler": self._on_message}
        async with create_session(cast(Connection, connection)) as session:
            async with asyncio.timeout(self.config.connect_timeout_seconds):
                await session.initialize()
                self._use(await _list_tools(session))
            self._session, self._lost = session, asyncio.Event()
            self._status, self._error = "available", None
            self._settled.set()
            logger.info("MCP server %s connected: %d tools", self.name, len(self._listing.tools))
            try:
                await self._watch(session)
            finally:
                self._session = None

    async def _watch(self, session: ClientSession) -> None:
        """Keeps the tool list current; returns once the session is lost (a failed call or ping)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.ping_seconds):
                    await self._wake.wait()
            self._wake.clear()
            if self._lost.is_set():
                raise ConnectionError("the server went away during a call")
            async with asyncio.timeout(self.config.connect_timeout_seconds):
                if self._changed:
                    self._changed = False
                    self._use(await _list_tools(session))
                else:
                    await session.send_ping()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, ServerNotification) and isinstance(message.root, ToolListChangedNotification):
            self._changed = True
            self._wake.set()

    def _use(self, listed: list[McpTool]) -> None:
        digest = hashlib.sha256(
            json.dumps([tool.model_dump(mode="json") for tool in listed], sort_keys=True).encode()
        ).hexdigest()
        if digest == self._listing.digest:
            return  # the same tools: keep them, their schemas and the bindings made from them
        tools = tuple(self._convert(tool) for tool in listed)
        offered = ToolSet(tools, tuple(tool_schema(tool) for tool in tools), revision=digest[:16])
        self._listing = _Listing(digest, tools, offered)

    def _convert(self, listed: McpTool) -> BaseTool:
        tool = convert_mcp_tool_to_langchain_tool(
            cast(ClientSession, self._live), listed, server_name=self.name, tool_name_prefix=True
        )
        tool.metadata = {**(tool.metadata or {}), SERVER_KEY: self.name}
        return tool

    def _mark_unavailable(self, exc: BaseException) -> None:
        self._status = "unavailable"
        self._error = _describe(exc)
        logger.warning("MCP server %s unavailable: %s", self.name, self._error)

    # -- calls -----------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], progress: Any = None) -> CallToolResult:
        session = self._session
        label = f"{self.name}_{tool}"
        if session is None:
            _count(self.name, label, "unavailable", None)
            raise ToolException(
                f"the MCP server {self.name} is unavailable right now; answer without {label}"
            )
        started = time.perf_counter()
        outcome: CallOutcome = "cancelled"
        try:
            async with asyncio.timeout(self.config.call_timeout_seconds):
                result = await session.call_tool(tool, arguments, progress_callback=progress)
            outcome = "error" if result.isError else "ok"
            return result
        except TimeoutError as exc:
            outcome = "timeout"
            limit = self.config.call_timeout_seconds
            raise ToolException(
                f"{label} did not answer within {limit:g} s, so the call was stopped"
            ) from exc
        except (McpError, *_LOST) as exc:
            if isinstance(exc, McpError) and exc.error.code != CONNECTION_CLOSED:
                outcome = "error"
                raise ToolException(f"{label} failed: {exc.error.message}") from exc
            outcome = "unavailable"
            self._lost.set()
            self._wake.set()
            self._session = None
            self._mark_unavailable(exc)
            raise ToolException(
                f"the MCP server {self.name} went away during the call; its tools are unavailable until "
                "it reconnects"
            ) from exc
        except Exception:
            outcome = "error"
            raise
        finally:
            _count(self.name, label, outcome, (time.perf_counter() - started) * 1000)


def _count(server: str, tool: str, outcome: CallOutcome, duration_ms: float | None) -> None:
    labels = {"mcp_server": server, "tool": tool}
    instruments.mcp_tool_calls.add(1, {**labels, "outcome": outcome})
    if (record := _recording.get()) is not None:
        record.outcome, record.duration_ms = outcome, duration_ms
    if duration_ms is not None:
        instruments.mcp_tool_duration.record(duration_ms, labels)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _list_tools(session: ClientSession) -> list[McpTool]:
    listed: list[McpTool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(cursor=cursor)
        listed.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return listed


@dataclass
class McpToolbox:
    """Every configured MCP server; `offer` gives a turn the tools of its enabled servers."""

    servers: Mapping[str, McpServer]
    _offers: dict[tuple[tuple[str, str], ...], ToolSet] = field(default_factory=dict)

    @classmethod
    def from_config(cls, configs: Mapping[str, StreamableHttpServer | StdioServer]) -> McpToolbox:
        return cls({name: McpServer(name, config) for name, config in configs.items()})

    def enabled(self, chosen: Sequence[str] | None) -> list[McpServer]:
        """The servers a conversation uses: its choice, or the deployment's default set."""
        if chosen is None:
            return [server for server in self.servers.values() if server.config.enabled_by_default]
        return [self.servers[name] for name in chosen if name in self.servers]

    async def offer(self, chosen: Sequence[str] | None) -> ToolSet:
        """The tools of the enabled servers that are available. The first turn waits for the
        servers' first connection (within their connect timeout)."""
        servers = self.enabled(chosen)
        for server in servers:
            server.start()
        pending = [server for server in servers if server.status == "connecting"]
        if pending:
            await asyncio.gather(*(server.settled() for server in pending))
        parts = [server.offered() for server in servers]
        key = tuple((server.name, part.revision) for server, part in zip(servers, parts, strict=True))
        found = self._offers.get(key)
        if found is None:
            found = ToolSet.joined(parts)
            self._offers[key] = found
        return found

    def views(self) -> list[McpServerInfo]:
        """The servers as they are now."""
        return [server.info() for server in self.servers.values()]

    def start(self) -> None:
        """Connect every server in the background (the first turn or listing then waits less)."""
        for server in self.servers.values():
            server.start()

    async def listing(self) -> list[McpServerInfo]:
        """The servers, each connected or tried once first (within its connect timeout)."""
        self.start()
        await asyncio.gather(*(server.settled() for server in self.servers.values()))
        return self.views()

    async def aclose(self) -> None:
        await asyncio.gather(*(server.aclose() for server in self.servers.values()))
