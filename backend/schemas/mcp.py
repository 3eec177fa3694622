"""Bodies of the tools panel's endpoints: the MCP servers a conversation may enable."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from chat_shell.contracts import McpServerInfo

ServerName = Annotated[str, Field(min_length=1, max_length=24)]
# A server's name, or one of its tools as the model sees it (`<server>_<tool>`).
AskFirstName = Annotated[str, Field(min_length=1, max_length=128)]


class McpServerOut(McpServerInfo):
    # Whether this conversation's turns use the server.
    enabled: bool


class McpPanel(BaseModel):
    servers: list[McpServerOut]
    # False while the conversation uses the deployment's default set.
    chosen: bool
    # The servers and tools whose calls wait for the user's decision ("ask first").
    ask_first: list[str] = Field(default_factory=list)


class McpChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The servers to enable, by name; null goes back to the deployment's default set.
    servers: list[ServerName] | None = Field(max_length=100)
    # Servers and tools to mark "ask first" (replacing the marks); omitted: left as they are.
    ask_first: list[AskFirstName] | None = Field(default=None, max_length=500)
