"""Attachment previews (SPEC 5.2, stage 2): attachment text never enters the context whole.

A user message names its attachments in its markers (`attachment_ids`); its content holds only
what the user typed. Before the model sees the message, the attachments' text is rendered into
one `<attachments>` block in front of the content (`block`):

- the message's attachments share one token budget (the profile's attachment budget),
  water-filled smallest-first: small ones are shown whole, the rest share what is left equally;
- each attachment gets a header (name, id, type, size, chars, tokens, truncated yes/no) and,
  when cut, a head (60%) and tail (40%) preview, an omission marker with character offsets and
  a type-aware hint to call `read_attachment(attachment_id, offset, limit)` (`wording`);
- images, binaries, empty files, failed extractions and deleted attachments get a header and a
  clear note, never a body; when even full headers do not fit (many attachments), a compact list
  that stays within the budget;
- for a model that accepts images, image attachments (`shows_as_image`) are also shown as image
  parts after the block, each counted at `IMAGE_PART_TOKENS` from the same budget: as many as
  take at most half of it, in the message's order; the rest are described as for other models.

Only the head and tail of each text are read (through `AttachmentReader`), never the whole of a
large one. The guard's attachment source (`source`) decides when a message shows which preview.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from chat_shell.accounting.text_counter import FETCH_CHARS_PER_TOKEN, HEAD_SHARE
from chat_shell.accounting.token_counter import IMAGE_PART_TOKENS, TokenCounter, image_room
from chat_shell.contracts import AttachmentImage, AttachmentReader, shows_as_image
from chat_shell.guard.stages.attachment_preview.block import CLOSING, OPENING
from chat_shell.guard.stages.attachment_preview.wording import (
    COMPACT_INTRO,
    Entry,
    compact_line,
    header,
    header_only_footer,
    hint,
    note,
    omission,
)
from chat_shell.messages.tool_images import image_url_part

# A share smaller than this shows nothing useful: the attachment is listed header-only.
MIN_BODY_TOKENS = 96
# An attachment with at most this many characters per token of its share may fit whole: it is
# read completely and counted exactly. Larger ones are certainly cut and only sampled.
FULL_READ_CHARS_PER_TOKEN = 8
# Slack for token merges where rendered parts meet.
_JOIN_SLACK = 8
_MAX_SHRINK_ROUNDS = 3
_PLACEHOLDER_TOKENS = "~999,999,999"


@dataclass(frozen=True)
class PreviewStats:
    attachments: int
    shown_whole: int
    truncated: int
    header_only: int
    unavailable: int
    # Tokens the attachments' full text would take (exact when shown whole, estimated when cut).
    source_tokens: int
    # The rendered block's tokens: exact, or an upper bound that is within the budget.
    preview_tokens: int


@dataclass(frozen=True)
class RenderedPreview:
    text: str
    stats: PreviewStats
    # Image parts shown after the block (OpenAI's `image_url` form with a data URL).
    images: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class _Whole:
    text: str
    tokens: int


@dataclass(frozen=True)
class _Cut:
    head: str
    tail: str
    head_tokens: int
    tail_tokens: int
    total_chars: int
    # Source text kept for re-fitting when the rendered block needs to shrink.
    head_source: str
    tail_source: str

    @property
    def tail_start(self) -> int:
        return self.total_chars - len(self.tail)

    @property
    def estimated_tokens(self) -> int:
        sampled = len(self.head) + len(self.tail)
        return round(self.total_chars * (self.head_tokens + self.tail_tokens) / sampled) if sampled else 0


_Plan = _Whole | _Cut | None  # None: header only


@dataclass(eq=False)
class AttachmentPreviewer:
    """Renders the attachment block of messages in one conversation, for one turn.

    Results are cached per attachment list, so the hook calls of a turn render each message once.
    """

    reader: AttachmentReader
    conversation_id: int
    budget_tokens: int
    counter: TokenCounter
    _: KW_ONLY
    images: bool = False
    _cache: dict[tuple[int, ...], RenderedPreview] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._count = self.counter.count_text

    async def render(self, attachment_ids: Sequence[int]) -> RenderedPreview:
        key = tuple(attachment_ids)
        if key not in self._cache:
            self._cache[key] = await self._render(key)
        return self._cache[key]

    # -- rendering -------------------------------------------------------------------------

    async def _render(self, attachment_ids: tuple[int, ...]) -> RenderedPreview:
        # Independent lookups: issued together, so their I/O overlaps.
        entries = await asyncio.gather(
            *(self._entry(position, ident) for position, ident in enumerate(attachment_ids, 1))
        )
        entries, images = await self._pictures(entries)
        budget = self.budget_tokens - len(images) * IMAGE_PART_TOKENS
        preview = await self._render_full(entries, budget) or self._render_compact(entries, budget)
        if not images:
            return preview
        stats = replace(
            preview.stats, preview_tokens=preview.stats.preview_tokens + len(images) * IMAGE_PART_TOKENS
        )
        return RenderedPreview(preview.text, stats, images)

    async def _pictures(self, entries: list[Entry]) -> tuple[list[Entry], tuple[dict[str, Any], ...]]:
        """The entries, those shown as pictures marked so, and their image parts in order."""
        if not self.images:
            return entries, ()
        room = image_room(self.budget_tokens)
        chosen = [e for e in entries if e.ref is not None and shows_as_image(e.ref)][:room]
        fetched = await asyncio.gather(
            *(self.reader.image(self.conversation_id, e.attachment_id) for e in chosen),
            return_exceptions=True,
        )
        shown = {
            e.position: image
            for e, image in zip(chosen, fetched, strict=True)
            if isinstance(image, AttachmentImage)
        }
        for failure in fetched:
            if isinstance(failure, BaseException) and not isinstance(failure, LookupError):
                raise failure
        marked = [replace(e, shown_as_image=True) if e.position in shown else e for e in entries]
        return marked, tuple(image_url_part(shown[p].mime_type, shown[p].data_base64) for p in sorted(shown))

    async def _entry(self, position: int, attachment_id: int) -> Entry:
        try:
            ref = await self.reader.describe(self.conversation_id, attachment_id)
        except LookupError as exc:
            return Entry(position, attachment_id, None, str(exc))
        return Entry(position, attachment_id, ref, None)

    def _frame(self, entries: Sequence[Entry]) -> tuple[str, str]:
        opening = f'{OPENING}"{len(entries)}">'
        if len(entries) > 1:
            opening += "\nIDs: " + ", ".join(str(entry.attachment_id) for entry in entries)
        return opening, CLOSING

    async def _render_full(self, entries: Sequence[Entry], budget: int) -> RenderedPreview | None:
        """Headers for all, bodies water-filled; None when the headers alone do not fit."""
        n = len(entries)
        opening, closing = self._frame(entries)
        fixed_parts = [opening, closing]
        for entry in entries:
            fixed_parts.append(header(entry, n, _PLACEHOLDER_TOKENS, True))
            if not entry.readable:
                fixed_parts.append(note(entry))
        fixed = self._count("\n".join(fixed_parts)) + _JOIN_SLACK
        if fixed > budget:
            return None
        plans = await self._water_fill([e for e in entries if e.readable], budget - fixed)
        if plans is None:
            return None
        for _ in range(_MAX_SHRINK_ROUNDS):
            text, bound = self._assemble(entries, plans)
            # The sum of the parts' counts (plus one per line join) bounds the block's count;
            # only when that bound is over budget is the whole block counted exactly.
            tokens = bound if bound <= budget else self._count(text)
            if tokens <= budget:
                return RenderedPreview(text, self._stats(entries, plans, tokens))
            plans = self._shrink(plans, tokens - budget)
        return None

    async def _water_fill(self, readable: Sequence[Entry], remaining: int) -> dict[int, _Plan] | None:
        plans: dict[int, _Plan] = {}
        order = sorted(readable, key=lambda e: (e.ref.extracted_chars if e.ref else 0, e.position))
        whole_texts: dict[int, str] = {}
        cut_from = len(order)
        for index, entry in enumerate(order):
            assert entry.ref is not None
            share = remaining // (len(order) - index)
            chars = entry.ref.extracted_chars
            if chars > share * FULL_READ_CHARS_PER_TOKEN:
                cut_from = index
                break
            page = await self.reader.read(self.conversation_id, entry.attachment_id, 0, chars)
            tokens = self._count(page.text)
            if tokens > share:
                whole_texts[entry.position] = page.text
                cut_from = index
                break
            plans[entry.position] = _Whole(page.text, tokens)
            remaining -= tokens
        to_cut = order[cut_from:]
        if not to_cut:
            return plans
        costs = {e.position: self._count(self._cut_extras(e)) for e in to_cut}
        share = remaining // len(to_cut)
        if any(share - costs[e.position] < MIN_BODY_TOKENS for e in to_cut):
            # Too many to preview usefully: list them header-only, with one shared hint.
            if self._count(header_only_footer(len(to_cut), len(order))) > remaining:
                return None
            plans.update({e.position: None for e in to_cut})
            return plans
        cuts = await asyncio.gather(
            *(self._cut(e, share - costs[e.position], whole_texts.get(e.position)) for e in to_cut)
        )
        plans.update({entry.position: cut for entry, cut in zip(to_cut, cuts, strict=True)})
        return plans

    @staticmethod
    def _cut_extras(entry: Entry) -> str:
        assert entry.ref is not None
        total = entry.ref.extracted_chars
        return f"{omission(total, total)}\n{hint(entry.ref, total)}"

    async def _cut(self, entry: Entry, allocation: int, whole: str | None) -> _Cut:
        assert entry.ref is not None
        total = entry.ref.extracted_chars
        head_budget = int(allocation * HEAD_SHARE)
        tail_budget = allocation - head_budget
        head_fetch = min(total, head_budget * FETCH_CHARS_PER_TOKEN)
        # The tail is fetched from beyond the head's fetch, so the two never overlap.
        tail_from = max(head_fetch, total - tail_budget * FETCH_CHARS_PER_TOKEN)
        if whole is not None:
            head_source, tail_source = whole[:head_fetch], whole[tail_from:]
        else:
            page, tail_source = await asyncio.gather(
                self.reader.read(self.conversation_id, entry.attachment_id, 0, head_fetch),
                self.reader.tail(self.conversation_id, entry.attachment_id, total - tail_from),
            )
            head_source = page.text
        head, head_tokens = self._head(head_source, head_budget)
        tail, tail_tokens = self._tail(tail_source, tail_budget)
        return _Cut(head, tail, head_tokens, tail_tokens, total, head_source, tail_source)

    def _head(self, text: str, max_tokens: int) -> tuple[str, int]:
        """The head shown of `text`, ending at a line break when one is near, and its tokens."""
        head = self.counter.text.head(text, max_tokens, lines=True)
        return head, self._count(head)

    def _tail(self, text: str, max_tokens: int) -> tuple[str, int]:
        tail = self.counter.text.tail(text, max_tokens, lines=True)
        return tail, self._count(tail)

    def _shrink(self, plans: dict[int, _Plan], over: int) -> dict[int, _Plan]:
        cuts = [position for position, plan in plans.items() if isinstance(plan, _Cut)]
        if not cuts:
            return plans
        less = -(-(over + _JOIN_SLACK) // len(cuts))
        shrunk = dict(plans)
        for position in cuts:
            plan = plans[position]
            assert isinstance(plan, _Cut)
            allocation = max(0, plan.head_tokens + plan.tail_tokens - less)
            head_budget = int(allocation * HEAD_SHARE)
            head, head_tokens = self._head(plan.head_source, head_budget)
            tail, tail_tokens = self._tail(plan.tail_source, allocation - head_budget)
            shrunk[position] = _Cut(
                head, tail, head_tokens, tail_tokens, plan.total_chars, plan.head_source, plan.tail_source
            )
        return shrunk

    def _assemble(self, entries: Sequence[Entry], plans: dict[int, _Plan]) -> tuple[str, int]:
        """The block, and an upper bound of its tokens (the parts' counts plus one per join)."""
        n = len(entries)
        opening, closing = self._frame(entries)
        parts: list[tuple[str, int | None]] = [(opening, None)]
        header_only = 0
        for entry in entries:
            if not entry.readable:
                shown = f"~{IMAGE_PART_TOKENS}" if entry.shown_as_image else "0"
                parts += [(header(entry, n, shown, False), None), (note(entry), None)]
                continue
            assert entry.ref is not None
            plan = plans[entry.position]
            if isinstance(plan, _Whole):
                parts += [
                    (header(entry, n, f"{plan.tokens:,}", False), None),
                    (plan.text.rstrip("\n"), plan.tokens),
                ]
            elif isinstance(plan, _Cut):
                parts += [
                    (header(entry, n, f"~{plan.estimated_tokens:,}", True), None),
                    (plan.head.rstrip("\n"), plan.head_tokens),
                    (omission(len(plan.head), plan.tail_start), None),
                    (plan.tail.rstrip("\n"), plan.tail_tokens),
                    (hint(entry.ref, len(plan.head)), None),
                ]
            else:
                header_only += 1
                parts.append((header(entry, n, "not counted", True), None))
        if header_only:
            parts.append((header_only_footer(header_only, sum(1 for e in entries if e.readable)), None))
        parts.append((closing, None))
        bound = (
            sum(self._count(text) if tokens is None else tokens for text, tokens in parts) + len(parts) - 1
        )
        return "\n".join(text for text, _ in parts), bound

    def _render_compact(self, entries: Sequence[Entry], budget: int) -> RenderedPreview:
        """One short line per attachment, as many as fit, then a count of the rest."""
        n = len(entries)
        opening = f'{OPENING}"{n}">'
        intro = COMPACT_INTRO
        closing = CLOSING
        lines = [compact_line(entry) for entry in entries]
        kept = len(lines)
        while True:
            rest = n - kept
            more = (
                [f"- ... and {rest} more (IDs {entries[kept].attachment_id} to {entries[-1].attachment_id})"]
                if rest
                else []
            )
            text = "\n".join([opening, intro, *lines[:kept], *more, closing])
            tokens = self._count(text)
            if tokens <= budget or kept == 0:
                break
            over_ratio = budget / tokens
            kept = min(kept - 1, int(kept * over_ratio))
        if tokens > budget:
            text, tokens = "", 0
        stats = PreviewStats(
            attachments=n,
            shown_whole=0,
            truncated=0,
            header_only=sum(1 for e in entries if e.readable),
            unavailable=sum(1 for e in entries if e.ref is None),
            source_tokens=0,
            preview_tokens=tokens,
        )
        return RenderedPreview(text, stats)

    @staticmethod
    def _stats(entries: Sequence[Entry], plans: dict[int, _Plan], tokens: int) -> PreviewStats:
        values = list(plans.values())
        return PreviewStats(
            attachments=len(entries),
            shown_whole=sum(1 for p in values if isinstance(p, _Whole)),
            truncated=sum(1 for p in values if isinstance(p, _Cut)),
            header_only=sum(1 for p in values if p is None),
            unavailable=sum(1 for e in entries if e.ref is None),
            source_tokens=sum(
                p.tokens if isinstance(p, _Whole) else p.estimated_tokens for p in values if p is not None
            ),
            preview_tokens=tokens,
        )
