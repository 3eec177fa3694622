"""Which MCP servers a conversation uses: the runtime lists what is configured, the
conversation stores its choice (None: the deployment's default set) and which servers and
tools ask first (each call waits for the user's decision)."""

from __future__ import annotations

from backend.models import Conversation
from backend.schemas.mcp import McpPanel, McpServerOut
from backend.services.errors import Invalid, Unavailable
from chat_shell.contracts import McpServerInfo, TurnRuntime
from chat_shell.service_client import ServiceUnavailable


async def _configured(runtime: TurnRuntime) -> list[McpServerInfo]:
    try:
        return await runtime.mcp_servers()
    except ServiceUnavailable as exc:
        raise Unavailable("runtime_unavailable", "the chat runtime cannot list its MCP servers now") from exc


def _panel(servers: list[McpServerInfo], conversation: Conversation) -> McpPanel:
    chosen = conversation.mcp_servers
    return McpPanel(
        servers=[
            McpServerOut(
                **server.model_dump(),
                enabled=server.enabled_by_default if chosen is None else server.name in chosen,
            )
            for server in servers
        ],
        chosen=chosen is not None,
        ask_first=conversation.mcp_ask_first or [],
    )


async def panel(runtime: TurnRuntime, conversation: Conversation) -> McpPanel:
    return _panel(await _configured(runtime), conversation)


def _ask_first(servers: list[McpServerInfo], names: list[str]) -> list[str]:
    """`names` checked: each a configured server, or a tool of one (`<server>_<tool>`; a server
    that is unavailable now lists no tools, so only the prefix is checked)."""
    configured = {server.name for server in servers}
    unknown = sorted(
        name for name in set(names) if name not in configured and name.split("_", 1)[0] not in configured
    )
    if unknown:
        raise Invalid("unknown_mcp_tool", f"no MCP server or tool is configured as {', '.join(unknown)}")
    return sorted(set(names))


async def choose(
    runtime: TurnRuntime, conversation: Conversation, names: list[str] | None, ask_first: list[str] | None
) -> McpPanel:
    servers = await _configured(runtime)
    if names is not None:
        unknown = sorted(set(names) - {server.name for server in servers})
        if unknown:
            raise Invalid("unknown_mcp_server", f"no MCP server is configured as {', '.join(unknown)}")
        names = [server.name for server in servers if server.name in names]
    if ask_first is not None:
        conversation.mcp_ask_first = _ask_first(servers, ask_first) or None
    conversation.mcp_servers = names
    return _panel(servers, conversation)
