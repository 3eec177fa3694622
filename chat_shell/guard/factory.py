"""The `GuardFactory` the runtime uses: one `UnifiedContextGuard` per turn attempt."""

from __future__ import annotations

from chat_shell.guard.context_guard import UnifiedContextGuard
from chat_shell.guard.protocol import GuardContext
from chat_shell.guard.stages.attachment_preview.source import AttachmentPreviewSource
from chat_shell.guard.stages.records import Strategy
from chat_shell.guard.stages.source import GuardSource
from chat_shell.guard.stages.summary_compaction.compactor import SummaryCompactor
from chat_shell.guard.stages.tool_output import ToolOutputSource


def default_sources(ctx: GuardContext) -> list[GuardSource]:
    """The source stages, in order (SPEC 5.2): tool outputs, then attachment previews."""
    images = ctx.profile.accepts_images and not ctx.profile.string_content_only
    return [
        ToolOutputSource(images=images),
        AttachmentPreviewSource(ctx.conversation_id, ctx.attachments, images=images),
    ]


def summary_compactor(
    ctx: GuardContext, *, strategy: Strategy = "summary_compact", own_ids: frozenset[str] = frozenset()
) -> SummaryCompactor | None:
    """The summary stage, when the profile enables it and the runtime gave a summarizer."""
    if ctx.summarizer is None or not ctx.profile.compaction_enabled:
        return None
    return SummaryCompactor(
        ctx.summarizer,
        conversation_id=ctx.conversation_id,
        checkpoint_message_id=ctx.assistant_message_id,
        settings=ctx.compaction,
        strategy=strategy,
        own_ids=own_ids,
    )


def _guard(ctx: GuardContext, compactor: SummaryCompactor | None) -> UnifiedContextGuard:
    return UnifiedContextGuard(
        ctx.profile,
        ctx.budget,
        emit=ctx.emit,
        tools=ctx.tools,
        sources=default_sources(ctx),
        summary_compactor=compactor,
        force_compaction=ctx.force_compaction,
        counter=ctx.counter,
        guidance=ctx.guidance,
    )


def build_guard(ctx: GuardContext) -> UnifiedContextGuard:
    return _guard(ctx, summary_compactor(ctx))


def build_ahead_guard(ctx: GuardContext, own_ids: frozenset[str]) -> UnifiedContextGuard:
    """The guard of a compaction ahead of time: the same stages and compactor as a turn's,
    recording `summary_ahead`; the finished turn's own messages (`own_ids`) are not cloned."""
    return _guard(ctx, summary_compactor(ctx, strategy="summary_ahead", own_ids=own_ids))


def build_preview_guard(ctx: GuardContext) -> UnifiedContextGuard:
    """The guard that shows the next turn's request: a turn's source stages, no summary stage."""
    return _guard(ctx, None)
