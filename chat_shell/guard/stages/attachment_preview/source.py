"""The attachment-preview source (SPEC 5.2.2): attachments reach the model as bounded previews.

A user message names its attachments in its `attachment_ids` marker (the current message from
`TurnRequest.user.attachments`, history messages from the backend's history); its content holds
only what the user typed. This source shows each such message, current and history alike, with
the preview block of its attachments in front (`AttachmentPreviewer`: per-message budget
water-filled smallest-first, headers, head/tail, type-aware `read_attachment` hints):

- `prepare` (async, the only I/O) renders the block of each new message's attachments under
  the normal policy (the profile's attachment budget) and the emergency one (× 0.3); both reads
  go through one `CachingAttachmentReader`, so the second costs no I/O.
- `render` (pure) swaps the block in, keeping the message id, so the guard's upsert puts the
  preview, never the whole file, into graph state and from there into a checkpoint. A message
  already showing the current block is left alone (idempotent, through the
  `attachment_preview` marker); a stale block (an attachment deleted since, another budget) is
  replaced, never nested.
- `attribute` claims the block's tokens, and its image parts', for the `attachments` bucket.

Renders are deterministic, so every turn shows the same bytes and provider prefix caches hold.
A `context_protection.attachment_preview` trace event is recorded only when a preview left text
out (cut, or headers only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter

from langchain_core.messages import BaseMessage, HumanMessage

from chat_shell.accounting.token_counter import IMAGE_PART_TOKENS
from chat_shell.contracts import AttachmentReader
from chat_shell.guard.stages.attachment_preview.block import Shown, preview_parts, with_preview
from chat_shell.guard.stages.attachment_preview.previewer import (
    AttachmentPreviewer,
    PreviewStats,
    RenderedPreview,
)
from chat_shell.guard.stages.source import EMERGENCY_RATIO, SourceContext
from chat_shell.messages.attachment_readers import CachingAttachmentReader, NoAttachmentReader
from chat_shell.messages.markers import markers
from chat_shell.telemetry import record_protection

BUCKET = "attachments"


@dataclass(frozen=True)
class _Previews:
    normal: RenderedPreview
    emergency: RenderedPreview


class AttachmentPreviewSource:
    name = "attachment_preview"
    adds_content = True

    def __init__(
        self, conversation_id: int, reader: AttachmentReader | None, *, images: bool = False
    ) -> None:
        self._conversation_id = conversation_id
        self._images = images
        self._reader = CachingAttachmentReader(reader if reader is not None else NoAttachmentReader())
        self._previewers: tuple[AttachmentPreviewer, AttachmentPreviewer] | None = None
        self._previews: dict[tuple[int, ...], _Previews] = {}
        self._block_tokens: dict[str, int] = {}

    def applies_to(self, message: BaseMessage) -> bool:
        return isinstance(message, HumanMessage) and bool(markers(message).attachment_ids)

    async def prepare(self, messages: Sequence[BaseMessage], ctx: SourceContext) -> None:
        started = perf_counter()
        shown: list[PreviewStats] = []
        for message in messages:
            if not self.applies_to(message):
                continue
            previews = await self._previews_for(_ids(message), ctx)
            parts = preview_parts(message)
            if parts is not None and not (
                _showing(parts, previews.normal) or _showing(parts, previews.emergency)
            ):
                shown.append(previews.normal.stats)
        _trace(shown, perf_counter() - started)

    def render(
        self, message: BaseMessage, tokens: int, ctx: SourceContext, *, emergency: bool
    ) -> BaseMessage | None:
        previews = self._previews.get(_ids(message)) if self.applies_to(message) else None
        parts = preview_parts(message)
        if previews is None or parts is None:
            return None
        target = previews.emergency if emergency else previews.normal
        # Under the normal policy a block already cut to the emergency policy stays as it is.
        if _showing(parts, target) or (not emergency and _showing(parts, previews.emergency)):
            return None
        return with_preview(message, target.text, parts.own, target.images)

    def attribute(self, message: BaseMessage, tokens: int, ctx: SourceContext) -> Mapping[str, int]:
        parts = preview_parts(message)
        block = parts.block if parts is not None else None
        if not block:
            return {}
        counted = self._block_tokens.get(block)
        if counted is None:
            counted = self._block_tokens[block] = ctx.counter.count_text(block)
        assert parts is not None
        return {BUCKET: counted + len(parts.images) * IMAGE_PART_TOKENS}

    async def _previews_for(self, ids: tuple[int, ...], ctx: SourceContext) -> _Previews:
        found = self._previews.get(ids)
        if found is None:
            normal, emergency = self._previewers_for(ctx)
            found = self._previews[ids] = _Previews(await normal.render(ids), await emergency.render(ids))
        return found

    def _previewers_for(self, ctx: SourceContext) -> tuple[AttachmentPreviewer, AttachmentPreviewer]:
        if self._previewers is None:
            budget = ctx.budget.attachment_preview_tokens
            counter = ctx.counter
            self._previewers = (
                AttachmentPreviewer(
                    self._reader, self._conversation_id, budget, counter, images=self._images
                ),
                AttachmentPreviewer(
                    self._reader,
                    self._conversation_id,
                    max(1, int(budget * EMERGENCY_RATIO)),
                    counter,
                    images=self._images,
                ),
            )
        return self._previewers


def _showing(parts: Shown, preview: RenderedPreview) -> bool:
    """Whether the message already shows `preview`: its block, and its pictures (not the text
    placeholders a chain stored in their place)."""
    return parts.block == preview.text and parts.images == preview.images


def _ids(message: BaseMessage) -> tuple[int, ...]:
    return tuple(markers(message).attachment_ids or ())


def _trace(shown: Sequence[PreviewStats], seconds: float) -> None:
    """One event per hook call that showed previews, when any of them left text out."""
    left_out = sum(s.truncated + s.header_only for s in shown)
    if not left_out:
        return
    record_protection(
        "attachment_preview",
        "applied",
        duration_ms=round(seconds * 1000, 3),
        before_tokens=sum(s.source_tokens for s in shown),
        after_tokens=sum(s.preview_tokens for s in shown),
        messages=len(shown),
        attachments=sum(s.attachments for s in shown),
        attachments_truncated=left_out,
        attachments_header_only=sum(s.header_only for s in shown),
    )
