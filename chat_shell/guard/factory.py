"""The `GuardFactory` the runtime uses: one `UnifiedContextGuard` per turn attempt."""

from __future__ import annotations

from chat_shell.compression.summary_compactor import SummaryCompactor
from chat_shell.guard.attachment_source import AttachmentPreviewSource
from chat_shell.guard.context_guard import UnifiedContextGuard
from chat_shell.guard.protocol import GuardContext
from chat_shell.guard.stages import GuardSource
from chat_shell.guard.tool_output import ToolOutputSource


def default_sources(ctx: GuardContext) -> list[GuardSource]:
    """The source stages, in order (SPEC 5.2): tool outputs, then attachment previews."""
    return [ToolOutputSource(), AttachmentPreviewSource(ctx.conversation_id, ctx.attachments)]


def summary_compactor(ctx: GuardContext) -> SummaryCompactor | None:
    """The summary stage, when the profile enables it and the runtime gave a summarizer."""
    if ctx.summarizer is None or not ctx.profile.compaction_enabled:
        return None
    return SummaryCompactor(
        ctx.summarizer,
        conversation_id=ctx.conversation_id,
        checkpoint_message_id=ctx.assistant_message_id,
        timeout_seconds=ctx.summary_timeout_seconds,
        heartbeat_seconds=ctx.compaction_heartbeat_seconds,
    )


def build_guard(ctx: GuardContext) -> UnifiedContextGuard:
    return UnifiedContextGuard(
        ctx.profile,
        emit=ctx.emit,
        tool_schemas=ctx.tool_schemas,
        sources=default_sources(ctx),
        summary_compactor=summary_compactor(ctx),
        force_compaction=ctx.force_compaction,
    )
