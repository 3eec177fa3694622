"""`AttachmentReader`s chat_shell builds on top of its host's reader.

- `CachingAttachmentReader`: one turn attempt's view of the host reader. Previews under the
  normal and the emergency policy read the same descriptions, heads and tails; the second
  render is served from what the first one fetched. Extracts never change, and a deletion
  during the attempt shows from the next attempt on.
- `NoAttachmentReader`: for a runtime whose host gave it no reader; every attachment is
  unavailable, with a reason the model can pass on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

from chat_shell.contracts import AttachmentImage, AttachmentPage, AttachmentReader, AttachmentRef

T = TypeVar("T")


@dataclass
class _Fetched:
    ref: AttachmentRef | LookupError | None = None
    head: str = ""  # the longest prefix read so far
    tail: str = ""  # the longest suffix read so far
    image: AttachmentImage | LookupError | None = None


@dataclass
class CachingAttachmentReader:
    inner: AttachmentReader
    _fetched: dict[tuple[int, int], _Fetched] = field(default_factory=dict)

    def _entry(self, conversation_id: int, attachment_id: int) -> _Fetched:
        return self._fetched.setdefault((conversation_id, attachment_id), _Fetched())

    async def describe(self, conversation_id: int, attachment_id: int) -> AttachmentRef:
        entry = self._entry(conversation_id, attachment_id)
        return await _once(entry, "ref", lambda: self.inner.describe(conversation_id, attachment_id))

    async def read(
        self, conversation_id: int, attachment_id: int, offset: int, limit_chars: int
    ) -> AttachmentPage:
        entry = self._entry(conversation_id, attachment_id)
        ref = entry.ref if isinstance(entry.ref, AttachmentRef) else None
        if offset == 0 and ref is not None and min(limit_chars, ref.extracted_chars) <= len(entry.head):
            text = entry.head[: max(0, limit_chars)]
            return AttachmentPage(
                attachment_id=attachment_id,
                offset=0,
                text=text,
                next_offset=len(text),
                total_chars=ref.extracted_chars,
                has_more=len(text) < ref.extracted_chars,
                truncated_at_parse=ref.truncated_at_parse,
            )
        page = await self.inner.read(conversation_id, attachment_id, offset, limit_chars)
        if offset == 0 and len(page.text) > len(entry.head):
            entry.head = page.text
        return page

    async def tail(self, conversation_id: int, attachment_id: int, chars: int) -> str:
        entry = self._entry(conversation_id, attachment_id)
        if 0 <= chars <= len(entry.tail):
            return entry.tail[len(entry.tail) - chars :]
        text = await self.inner.tail(conversation_id, attachment_id, chars)
        if len(text) > len(entry.tail):
            entry.tail = text
        return text

    async def image(self, conversation_id: int, attachment_id: int) -> AttachmentImage:
        entry = self._entry(conversation_id, attachment_id)
        return await _once(entry, "image", lambda: self.inner.image(conversation_id, attachment_id))


async def _once(entry: _Fetched, name: str, fetch: Callable[[], Awaitable[T]]) -> T:
    """`entry`'s field `name`, fetched on first use; a `LookupError` is remembered and raised again."""
    found = getattr(entry, name)
    if found is None:
        try:
            found = await fetch()
        except LookupError as exc:
            found = exc
        setattr(entry, name, found)
    if isinstance(found, LookupError):
        raise found
    return cast(T, found)


@dataclass(frozen=True)
class NoAttachmentReader:
    reason: str = "attachment text cannot be read here: this runtime has no attachment reader"

    async def describe(self, conversation_id: int, attachment_id: int) -> AttachmentRef:
        raise LookupError(self.reason)

    async def read(
        self, conversation_id: int, attachment_id: int, offset: int, limit_chars: int
    ) -> AttachmentPage:
        raise LookupError(self.reason)

    async def tail(self, conversation_id: int, attachment_id: int, chars: int) -> str:
        raise LookupError(self.reason)

    async def image(self, conversation_id: int, attachment_id: int) -> AttachmentImage:
        raise LookupError(self.reason)
