"""The MCP servers an operator declares (docs/features.md "MCP servers"): a JSON or TOML file.

    [servers.logs]
    transport = "streamable_http"
    url = "https://logs.internal/mcp"
    headers_from_env = { Authorization = "LOGS_MCP_AUTHORIZATION" }

    [servers.files]
    transport = "stdio"
    command = "uvx"
    args = ["mcp-server-filesystem", "/srv/shared"]
    env = { LOG_LEVEL = "warning" }
    enabled_by_default = false

Header values are never written in the file: each names the environment variable that holds
it, read when the server connects. Users never supply commands or URLs; a conversation only
picks among these servers by name.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

if TYPE_CHECKING:
    # The MCP SDK takes a second or more to import: the settings read this module at every
    # start (before the local model's server is started), so the SDK loads only when a
    # connection is made.
    from langchain_mcp_adapters.sessions import Connection, StdioConnection, StreamableHttpConnection

# Tool names reach the model as `<server>_<tool>`, which OpenAI-style APIs limit to this alphabet.
ServerName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]{1,24}$")]


class McpConfigurationError(ValueError):
    """The MCP servers file cannot be used as it is."""


class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A call that takes longer ends as a tool error the model sees.
    call_timeout_seconds: float = Field(default=60.0, gt=0)
    # Connecting (process start or HTTP handshake, and listing the tools) within this.
    connect_timeout_seconds: float = Field(default=15.0, gt=0)
    # After the server went away (or could not be reached), the next connection attempt waits this long.
    reconnect_seconds: float = Field(default=5.0, gt=0)
    # A connected server is pinged this often, so one that went away while idle is noticed.
    ping_seconds: float = Field(default=30.0, gt=0)
    # Offered in conversations that have not chosen their servers.
    enabled_by_default: bool = True


class StreamableHttpServer(_Server):
    transport: Literal["streamable_http"]
    url: str
    # HTTP header -> the environment variable whose value it sends.
    headers_from_env: dict[str, str] = Field(default_factory=dict)

    def connection(self, environ: Mapping[str, str]) -> StreamableHttpConnection:
        missing = [variable for variable in self.headers_from_env.values() if variable not in environ]
        if missing:
            raise McpConfigurationError(f"environment variable(s) not set: {', '.join(missing)}")
        headers = {header: environ[variable] for header, variable in self.headers_from_env.items()}
        from langchain_mcp_adapters.sessions import StreamableHttpConnection

        return StreamableHttpConnection(
            transport="streamable_http", url=self.url, headers=headers, timeout=self.connect_timeout_seconds
        )


class StdioServer(_Server):
    transport: Literal["stdio"]
    command: str
    args: list[str] = Field(default_factory=list)
    # Added to the SDK's safe default environment (PATH, HOME, ...).
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None

    def connection(self, environ: Mapping[str, str]) -> StdioConnection:
        from langchain_mcp_adapters.sessions import StdioConnection

        return StdioConnection(
            transport="stdio", command=self.command, args=self.args, env=self.env or None, cwd=self.cwd
        )


McpServerConfig = Annotated[StreamableHttpServer | StdioServer, Field(discriminator="transport")]


class McpServersFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: dict[ServerName, McpServerConfig] = Field(default_factory=dict)


def connection_for(config: StreamableHttpServer | StdioServer) -> Connection:
    return config.connection(os.environ)


def parse_servers(data: Mapping[str, Any]) -> dict[str, StreamableHttpServer | StdioServer]:
    try:
        return dict(McpServersFile.model_validate(data).servers)
    except ValidationError as exc:
        raise McpConfigurationError(f"invalid MCP servers configuration: {exc}") from exc


def load_servers(path: Path) -> dict[str, StreamableHttpServer | StdioServer]:
    """The servers declared in `path` (`.toml`, else JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise McpConfigurationError(f"cannot read the MCP servers file {path}: {exc}") from exc
    return parse_servers(data)
