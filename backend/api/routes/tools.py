"""The tools panel: the MCP servers a conversation may use, and which it enabled."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.deps import Ctx, CurrentUser, Db
from backend.api.params import ConversationId
from backend.schemas.mcp import McpChoice, McpPanel
from backend.services import mcp_servers
from backend.services.conversations import conversations

router = APIRouter(prefix="/api/conversations", tags=["tools"])


@router.get("/{conversation_id}/mcp-servers", response_model=McpPanel)
async def list_mcp_servers(conversation_id: ConversationId, user: CurrentUser, db: Db, ctx: Ctx) -> McpPanel:
    conversation = await conversations.get_owned(db, user, conversation_id)
    return await mcp_servers.panel(ctx.runner.runtime, conversation)


@router.put("/{conversation_id}/mcp-servers", response_model=McpPanel)
async def choose_mcp_servers(
    conversation_id: ConversationId, body: McpChoice, user: CurrentUser, db: Db, ctx: Ctx
) -> McpPanel:
    conversation = await conversations.get_owned(db, user, conversation_id)
    return await mcp_servers.choose(ctx.runner.runtime, conversation, body.servers, body.ask_first)
