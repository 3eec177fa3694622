"""The words of attachment previews: headers, notes, hints and omission markers (SPEC 5.2.2).

Every text here depends only on its inputs (no clocks, no dict order), so a preview renders
byte-identically on every turn and provider prefix caches keep hitting.
"""

from __future__ import annotations

from dataclasses import dataclass

from chat_shell.contracts import AttachmentRef
from chat_shell.sizes import byte_size

# Opens a preview listed without content, when even headers do not fit the budget.
COMPACT_INTRO = (
    "Too many attachments to preview within the budget; they are listed without content. "
    "Read any of them with read_attachment(attachment_id=<ID>, offset=0, limit=...)."
)


@dataclass(frozen=True)
class Entry:
    """One attachment of a message, as far as it could be described."""

    position: int  # 1-based, in the message's order
    attachment_id: int
    ref: AttachmentRef | None
    problem: str | None  # why it cannot be read (LookupError from the reader)
    # The model is shown the picture itself, as an image part after the block.
    shown_as_image: bool = False

    @property
    def readable(self) -> bool:
        return self.ref is not None and self.ref.status == "ready" and self.ref.extracted_chars > 0


def type_label(ref: AttachmentRef) -> str:
    return f"{ref.mime_type} ({ref.kind})" if ref.kind and ref.kind not in ref.mime_type else ref.mime_type


def header(entry: Entry, count: int, tokens: str, truncated: bool) -> str:
    ref = entry.ref
    if ref is None:
        return f"[Attachment {entry.position}/{count} | ID: {entry.attachment_id} | unavailable]"
    return (
        f"[Attachment {entry.position}/{count} | ID: {ref.id} | Name: {ref.filename}"
        f" | Type: {type_label(ref)} | Size: {byte_size(ref.size_bytes)}"
        f" | Chars: {ref.extracted_chars:,} | Tokens: {tokens} | Truncated: {'yes' if truncated else 'no'}]"
    )


def note(entry: Entry) -> str:
    """The body of an attachment that has no text to show."""
    ref = entry.ref
    if ref is None:
        return f"(Not available: {entry.problem})"
    if ref.status == "failed":
        reason = ref.note or "unknown reason"
        return f"(Text extraction failed: {reason}. The file is stored; its text is not available.)"
    if ref.status == "uploading":
        return "(Still being processed; its text is not available yet.)"
    if ref.kind == "image" and entry.shown_as_image:
        return "(Image: shown to you as a picture after this block, in the order of this list.)"
    if ref.kind == "image":
        return "(Image: stored, no text extracted. You cannot see its content; say so if asked about it.)"
    if ref.kind == "empty":
        return "(Empty file: 0 bytes.)"
    if ref.kind == "binary":
        return "(Binary file: stored, no text extracted; its content is not available as text.)"
    return f"(No text found in this file{': ' + ref.note if ref.note else ''}.)"


def _call(ref: AttachmentRef, offset: int | str) -> str:
    return f"read_attachment(attachment_id={ref.id}, offset={offset}, limit=...)"


def hint(ref: AttachmentRef, next_offset: int) -> str:
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


def omission(head_end: int, tail_start: int) -> str:
    return (
        f"[... {tail_start - head_end:,} characters omitted (offsets {head_end:,} to {tail_start:,}); "
        "see the hint below ...]"
    )


def header_only_footer(header_only: int, readable: int) -> str:
    return (
        f"(Only headers are shown for {header_only} of {readable} attachments: the preview budget is "
        "shared by all of them. Read any of them with read_attachment(attachment_id=<ID>, offset=0, "
        "limit=...).)"
    )


def compact_line(entry: Entry) -> str:
    ref = entry.ref
    if ref is None:
        return f"- ID {entry.attachment_id}: unavailable"
    return (
        f"- ID {ref.id}: {ref.filename} ({ref.mime_type}, {byte_size(ref.size_bytes)}, "
        f"{ref.extracted_chars:,} chars{', ' + ref.status if ref.status != 'ready' else ''})"
    )
