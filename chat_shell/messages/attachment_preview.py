"""Attachment previews (SPEC 5.2, stage 2): attachment text never enters the context whole.

A user message names its attachments in its markers (`attachment_ids`); its content holds only
what the user typed. Before the model sees the message, the attachments' text is rendered into
one `<attachments>` block in front of the content:

- the message's attachments share one token budget (`preview_budget`), water-filled
  smallest-first: small ones are shown whole, the rest share what is left equally;
- each attachment gets a header (name, id, type, size, chars, tokens, truncated yes/no) and,
  when cut, a head (60%) and tail (40%) preview, an omission marker with character offsets and
  a type-aware hint to call `read_attachment(attachment_id, offset, limit)`;
- images, binaries, empty files, failed extractions and deleted attachments get a header and a
  clear note, never a body; when even full headers do not fit (many attachments), a compact list
  that stays within the budget.

Only the head and tail of each text are read (through `AttachmentReader`), never the whole of a
large one. The output depends only on the inputs (no clocks, no dict order), so a re-render is
byte-identical and provider prefix caches keep hitting. A message showing a preview is marked
`attachment_preview` with the block's length (`with_preview`), so a reloaded message is never
rendered twice and its block can be replaced without touching what the user wrote
(`preview_parts`). The guard's attachment source (`chat_shell.guard.attachment_source`) decides
when a message shows which preview.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from chat_shell.contracts import AttachmentReader, AttachmentRef
from chat_shell.messages.markers import markers, with_markers
from chat_shell.messages.text_fit import TokenCounter, fit_prefix, fit_suffix

PREVIEW_TOKEN_LIMIT = 15_000
# A share smaller than this shows nothing useful: the attachment is listed header-only.
MIN_BODY_TOKENS = 96
HEAD_SHARE = 0.6
# Characters fetched per token of a head or tail allocation (prose and logs run 3-5 chars/token).
FETCH_CHARS_PER_TOKEN = 6
# An attachment with at most this many characters per token of its share may fit whole: it is
# read completely and counted exactly. Larger ones are certainly cut and only sampled.
FULL_READ_CHARS_PER_TOKEN = 8
# Slack for token merges where rendered parts meet.
_JOIN_SLACK = 8
_MAX_SHRINK_ROUNDS = 3
_PLACEHOLDER_TOKENS = "~999,999,999"
OPENING = "<attachments count="
CLOSING = "</attachments>"
# Between the preview block and what the user wrote.
SEPARATOR = "\n\n"


def preview_budget(context_window: int, configured: int | None = None) -> int:
    """The per-message attachment budget: `min(window/2, 15000)` unless the profile sets one."""
    return configured if configured is not None else min(context_window // 2, PREVIEW_TOKEN_LIMIT)


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


@dataclass(frozen=True)
class _Entry:
    position: int  # 1-based, in the message's order
    attachment_id: int
    ref: AttachmentRef | None
    problem: str | None  # why it cannot be read (LookupError from the reader)

    @property
    def readable(self) -> bool:
        return self.ref is not None and self.ref.status == "ready" and self.ref.extracted_chars > 0


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


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _type_label(ref: AttachmentRef) -> str:
    return f"{ref.mime_type} ({ref.kind})" if ref.kind and ref.kind not in ref.mime_type else ref.mime_type


def _header(entry: _Entry, count: int, tokens: str, truncated: bool) -> str:
    ref = entry.ref
    if ref is None:
        return f"[Attachment {entry.position}/{count} | ID: {entry.attachment_id} | unavailable]"
    return (
        f"[Attachment {entry.position}/{count} | ID: {ref.id} | Name: {ref.filename}"
        f" | Type: {_type_label(ref)} | Size: {human_size(ref.size_bytes)}"
        f" | Chars: {ref.extracted_chars:,} | Tokens: {tokens} | Truncated: {'yes' if truncated else 'no'}]"
    )


def _note(entry: _Entry) -> str:
    """The body of an attachment that has no text to show."""
    ref = entry.ref
    if ref is None:
        return f"(Not available: {entry.problem})"
    if ref.status == "failed":
        reason = ref.note or "unknown reason"
        return f"(Text extraction failed: {reason}. The file is stored; its text is not available.)"
    if ref.status == "uploading":
        return "(Still being processed; its text is not available yet.)"
    if ref.kind == "image":
        return "(Image: stored, no text extracted. You cannot see its content; say so if asked about it.)"
    if ref.kind == "empty":
        return "(Empty file: 0 bytes.)"
    if ref.kind == "binary":
        return "(Binary file: stored, no text extracted; its content is not available as text.)"
    return f"(No text found in this file{': ' + ref.note if ref.note else ''}.)"


def _call(ref: AttachmentRef, offset: int | str) -> str:
    return f"read_attachment(attachment_id={ref.id}, offset={offset}, limit=...)"


def _hint(ref: AttachmentRef, next_offset: int) -> str:
    """How to get the rest, in terms of what the content is."""
    call = _call(ref, next_offset)
    if ref.kind == "log":
        return (
            f"(Log preview: first and last lines only. To find entries (errors, ids, times) page through the "
            f"middle with {call}, continuing at each page's next_offset; the newest entries are at the end.)"
        )
    if ref.kind == "table":
        rows = f" of {ref.rows:,} rows" if ref.rows else ""
        return (
            f"(Table preview: the header row and the first and last rows{rows}. Read more rows with {call}; "
            "columns follow the header row above.)"
        )
    if ref.kind == "xlsx":
        return (
            f"(Spreadsheet preview: sheets start at '[Sheet: name]' lines, rows are tab-separated"
            f"{f', {ref.rows:,} rows in all' if ref.rows else ''}. Read more rows with {call}.)"
        )
    if ref.kind == "pdf" and ref.pages:
        per_page = max(1, ref.extracted_chars // ref.pages)
        return (
            f"(PDF preview: {ref.pages} pages, each starting at a '[Page n/{ref.pages}]' line, about "
            f"{per_page:,} characters per page. To read page n call {_call(ref, f'(n-1)*{per_page}')}.)"
        )
    if ref.kind == "json":
        return f"(JSON preview: cut in the middle, so not valid JSON as shown. Read the rest with {call}.)"
    if ref.kind == "code":
        return f"(Source preview: beginning and end of the file. Read the middle with {call}.)"
    return f"(Preview truncated. Read the rest with {call}, continuing at each page's next_offset.)"


def _omission(head_end: int, tail_start: int) -> str:
    return (
        f"[... {tail_start - head_end:,} characters omitted (offsets {head_end:,} to {tail_start:,}); "
        "see the hint below ...]"
    )


class AttachmentPreviewer:
    """Renders the attachment block of messages in one conversation, for one turn.

    Results are cached per attachment list, so the hook calls of a turn render each message once.
    """

    def __init__(
        self, reader: AttachmentReader, conversation_id: int, budget_tokens: int, count: TokenCounter
    ) -> None:
        self._reader = reader
        self._conversation_id = conversation_id
        self._budget = budget_tokens
        self._count = count
        self._cache: dict[tuple[int, ...], RenderedPreview] = {}

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
        full = await self._render_full(entries)
        if full is not None:
            return full
        return self._render_compact(entries)

    async def _entry(self, position: int, attachment_id: int) -> _Entry:
        try:
            ref = await self._reader.describe(self._conversation_id, attachment_id)
        except LookupError as exc:
            return _Entry(position, attachment_id, None, str(exc))
        return _Entry(position, attachment_id, ref, None)

    def _frame(self, entries: Sequence[_Entry]) -> tuple[str, str]:
        opening = f'{OPENING}"{len(entries)}">'
        if len(entries) > 1:
            opening += "\nIDs: " + ", ".join(str(entry.attachment_id) for entry in entries)
        return opening, CLOSING

    async def _render_full(self, entries: Sequence[_Entry]) -> RenderedPreview | None:
        """Headers for all, bodies water-filled; None when the headers alone do not fit."""
        n = len(entries)
        opening, closing = self._frame(entries)
        fixed_parts = [opening, closing]
        for entry in entries:
            fixed_parts.append(_header(entry, n, _PLACEHOLDER_TOKENS, True))
            if not entry.readable:
                fixed_parts.append(_note(entry))
        fixed = self._count("\n".join(fixed_parts)) + _JOIN_SLACK
        if fixed > self._budget:
            return None
        plans = await self._water_fill([e for e in entries if e.readable], self._budget - fixed)
        if plans is None:
            return None
        for _ in range(_MAX_SHRINK_ROUNDS):
            text, bound = self._assemble(entries, plans)
            # The sum of the parts' counts (plus one per line join) bounds the block's count;
            # only when that bound is over budget is the whole block counted exactly.
            tokens = bound if bound <= self._budget else self._count(text)
            if tokens <= self._budget:
                return RenderedPreview(text, self._stats(entries, plans, tokens))
            plans = self._shrink(plans, tokens - self._budget)
        return None

    async def _water_fill(self, readable: Sequence[_Entry], remaining: int) -> dict[int, _Plan] | None:
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
            page = await self._reader.read(self._conversation_id, entry.attachment_id, 0, chars)
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
            if self._count(self._header_only_footer(len(to_cut), len(order))) > remaining:
                return None
            plans.update({e.position: None for e in to_cut})
            return plans
        cuts = await asyncio.gather(
            *(self._cut(e, share - costs[e.position], whole_texts.get(e.position)) for e in to_cut)
        )
        plans.update({entry.position: cut for entry, cut in zip(to_cut, cuts, strict=True)})
        return plans

    @staticmethod
    def _cut_extras(entry: _Entry) -> str:
        assert entry.ref is not None
        total = entry.ref.extracted_chars
        return f"{_omission(total, total)}\n{_hint(entry.ref, total)}"

    async def _cut(self, entry: _Entry, allocation: int, whole: str | None) -> _Cut:
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
                self._reader.read(self._conversation_id, entry.attachment_id, 0, head_fetch),
                self._reader.tail(self._conversation_id, entry.attachment_id, total - tail_from),
            )
            head_source = page.text
        head, head_tokens = fit_prefix(head_source, head_budget, self._count)
        tail, tail_tokens = fit_suffix(tail_source, tail_budget, self._count)
        return _Cut(head, tail, head_tokens, tail_tokens, total, head_source, tail_source)

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
            head, head_tokens = fit_prefix(plan.head_source, head_budget, self._count)
            tail, tail_tokens = fit_suffix(plan.tail_source, allocation - head_budget, self._count)
            shrunk[position] = _Cut(
                head, tail, head_tokens, tail_tokens, plan.total_chars, plan.head_source, plan.tail_source
            )
        return shrunk

    def _assemble(self, entries: Sequence[_Entry], plans: dict[int, _Plan]) -> tuple[str, int]:
        """The block, and an upper bound of its tokens (the parts' counts plus one per join)."""
        n = len(entries)
        opening, closing = self._frame(entries)
        parts: list[tuple[str, int | None]] = [(opening, None)]
        header_only = 0
        for entry in entries:
            if not entry.readable:
                parts += [(_header(entry, n, "0", False), None), (_note(entry), None)]
                continue
            assert entry.ref is not None
            plan = plans[entry.position]
            if isinstance(plan, _Whole):
                parts += [
                    (_header(entry, n, f"{plan.tokens:,}", False), None),
                    (plan.text.rstrip("\n"), plan.tokens),
                ]
            elif isinstance(plan, _Cut):
                parts += [
                    (_header(entry, n, f"~{plan.estimated_tokens:,}", True), None),
                    (plan.head.rstrip("\n"), plan.head_tokens),
                    (_omission(len(plan.head), plan.tail_start), None),
                    (plan.tail.rstrip("\n"), plan.tail_tokens),
                    (_hint(entry.ref, len(plan.head)), None),
                ]
            else:
                header_only += 1
                parts.append((_header(entry, n, "not counted", True), None))
        if header_only:
            parts.append((self._header_only_footer(header_only, sum(1 for e in entries if e.readable)), None))
        parts.append((closing, None))
        bound = (
            sum(self._count(text) if tokens is None else tokens for text, tokens in parts) + len(parts) - 1
        )
        return "\n".join(text for text, _ in parts), bound

    @staticmethod
    def _header_only_footer(header_only: int, readable: int) -> str:
        return (
            f"(Only headers are shown for {header_only} of {readable} attachments: the preview budget is "
            "shared by all of them. Read any of them with read_attachment(attachment_id=<ID>, offset=0, "
            "limit=...).)"
        )

    def _render_compact(self, entries: Sequence[_Entry]) -> RenderedPreview:
        """One short line per attachment, as many as fit, then a count of the rest."""
        n = len(entries)
        opening = f'{OPENING}"{n}">'
        intro = (
            "Too many attachments to preview within the budget; they are listed without content. "
            "Read any of them with read_attachment(attachment_id=<ID>, offset=0, limit=...)."
        )
        closing = CLOSING
        lines = [self._compact_line(entry) for entry in entries]
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
            if tokens <= self._budget or kept == 0:
                break
            over_ratio = self._budget / tokens
            kept = min(kept - 1, int(kept * over_ratio))
        if tokens > self._budget:
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
    def _compact_line(entry: _Entry) -> str:
        ref = entry.ref
        if ref is None:
            return f"- ID {entry.attachment_id}: unavailable"
        return (
            f"- ID {ref.id}: {ref.filename} ({ref.mime_type}, {human_size(ref.size_bytes)}, "
            f"{ref.extracted_chars:,} chars{', ' + ref.status if ref.status != 'ready' else ''})"
        )

    @staticmethod
    def _stats(entries: Sequence[_Entry], plans: dict[int, _Plan], tokens: int) -> PreviewStats:
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


Content = str | list[Any]


def preview_parts(message: BaseMessage) -> tuple[str | None, Content] | None:
    """The preview block a user message shows and its own content (what the user wrote).

    `(None, content)` when it shows no preview. None when it is marked as previewed but its
    content no longer starts with the block its marker describes (another stage rewrote it):
    such a message must be left alone.
    """
    found = markers(message)
    content = message.content
    if not found.attachment_preview:
        return None, content
    size = found.attachment_preview_chars
    if size is None:
        return None
    if size == 0:  # not even a list of the attachments fit the budget
        return "", content
    if isinstance(content, str):
        block, rest = content[:size], content[size:]
        if rest:
            if not rest.startswith(SEPARATOR):
                return None
            rest = rest[len(SEPARATOR) :]
    else:
        first = content[0] if content else None
        text = first.get("text") if isinstance(first, dict) and first.get("type") == "text" else None
        if not isinstance(text, str):
            return None
        block, rest = text, content[1:]
        if len(block) != size:
            return None
    if not (block.startswith(OPENING) and block.endswith(CLOSING)):
        return None
    return block, rest


def with_preview(message: BaseMessage, block: str, own: Content) -> BaseMessage:
    """A copy of `message` (same id) showing `block` in front of `own` (its own content, see
    `preview_parts`), marked `attachment_preview` with the block's length."""
    content: Content
    if not block:
        content = own
    elif isinstance(own, str):
        content = f"{block}{SEPARATOR}{own}" if own else block
    else:
        content = [{"type": "text", "text": block}, *own]
    shown = message.model_copy(update={"content": content})
    return with_markers(shown, attachment_preview=True, attachment_preview_chars=len(block), token_count=None)
