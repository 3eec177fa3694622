"""Streaming multipart uploads straight to disk, with the size limit enforced while receiving.

Starlette's form parser spools a whole file before the handler runs, so an over-limit upload
would be read completely first. Here python-multipart's push parser feeds the `file` part into
the destination file chunk by chunk; the first byte over the limit stops the upload, the partial
file is removed and nothing else is stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import unicodedata
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from python_multipart.multipart import MultipartParser, parse_options_header

from backend.services.decimals import ascii_decimal
from backend.services.errors import DomainError, Invalid, Malformed, TooLarge, UnsupportedMedia

FILE_FIELD = "file"
CONVERSATION_FIELD = "conversation_id"
# Headers, boundaries and the small form fields beside the file.
MULTIPART_OVERHEAD_BYTES = 64 * 1024
MAX_FIELD_BYTES = 1024
MAX_FILENAME_CHARS = 200
_FLUSH_BYTES = 1024 * 1024
# Bidirectional controls can make "gpj.exe" render as "exe.jpg"; they never belong in a name.
_BIDI_CONTROLS = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def upload_too_large(max_bytes: int) -> TooLarge:
    return TooLarge("upload_too_large", f"the file is larger than the upload limit of {max_bytes:,} bytes")


def sanitize_filename(raw: str | None) -> str:
    """A display name safe to store and to echo: the last path component, no control or bidi
    characters (whitespace controls become spaces), no surrounding blanks or dots, at most
    MAX_FILENAME_CHARS (extension kept).

    Stored files never use this name: they live under generated paths.
    """
    name = unicodedata.normalize("NFC", raw or "").replace("\\", "/")
    name = PurePosixPath(name).name if "/" in name else name
    name = "".join(
        " " if ch in "\t\n\r\v\f" else ch
        for ch in name
        if ch in "\t\n\r\v\f" or (unicodedata.category(ch) not in ("Cc", "Cs") and ch not in _BIDI_CONTROLS)
    )
    name = " ".join(name.split()).strip(" .")
    if not name:
        return "unnamed"
    if len(name) > MAX_FILENAME_CHARS:
        suffix = PurePosixPath(name).suffix
        suffix = suffix if 1 < len(suffix) <= 16 else ""
        name = name[: MAX_FILENAME_CHARS - len(suffix)].rstrip(" .") + suffix
    return name


@dataclass
class ReceivedFile:
    path: Path
    filename: str
    size: int
    sha256: str
    conversation_id: str | None  # the raw form value, validated by the caller


@dataclass
class _Part:
    name: str = ""
    is_file: bool = False
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    value: bytearray = field(default_factory=bytearray)


class _Receiver:
    """python-multipart callbacks. They run synchronously inside `parser.write`; file bytes are
    queued in `pending` and written by the async caller, off the event loop."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.part = _Part()
        self.header_name = bytearray()
        self.header_value = bytearray()
        self.file_seen = False
        self.file_done = False
        self.filename: str | None = None
        self.size = 0
        self.digest = hashlib.sha256()
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.fields: dict[str, str] = {}

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self.on_part_begin,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_header_field": lambda data, start, end: self.header_name.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self.header_value.extend(data[start:end]),
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
        }

    def on_part_begin(self) -> None:
        self.part = _Part()

    def on_header_end(self) -> None:
        self.part.headers.append((bytes(self.header_name).lower(), bytes(self.header_value)))
        self.header_name.clear()
        self.header_value.clear()

    def on_headers_finished(self) -> None:
        disposition = next(
            (value for name, value in self.part.headers if name == b"content-disposition"), b""
        )
        _, options = parse_options_header(disposition)
        self.part.name = _decode(options.get(b"name", b""))
        # Only the first `file` part is the upload; any other part is a small form field.
        if self.part.name == FILE_FIELD and b"filename" in options and not self.file_seen:
            self.part.is_file = True
            self.file_seen = True
            self.filename = _decode(options[b"filename"])

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if self.part.is_file:
            self.size += len(chunk)
            if self.size > self.max_bytes:
                raise upload_too_large(self.max_bytes)
            self.digest.update(chunk)
            self.pending.append(chunk)
            self.pending_bytes += len(chunk)
        else:
            if len(self.part.value) + len(chunk) > MAX_FIELD_BYTES:
                raise Invalid("validation_error", f"form field '{self.part.name}' is too long")
            self.part.value.extend(chunk)

    def on_part_end(self) -> None:
        if self.part.is_file:
            self.file_done = True
        elif self.part.name:
            self.fields[self.part.name] = _decode(bytes(self.part.value))

    def take_pending(self) -> bytes:
        data = b"".join(self.pending)
        self.pending.clear()
        self.pending_bytes = 0
        return data


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


async def receive_file(
    content_type: str,
    content_length: str | None,
    body: AsyncIterator[bytes],
    destination: Path,
    max_bytes: int,
) -> ReceivedFile:
    """Stream the multipart body's `file` part into `destination`.

    Raises 413 `upload_too_large` (declared or streamed size over the limit) and 422 for a
    malformed body; in every failure `destination` does not exist afterwards.
    """
    mime, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if mime != b"multipart/form-data" or not boundary:
        raise UnsupportedMedia(
            "unsupported_media_type", "send the file as multipart/form-data in a 'file' field"
        )
    limit = max_bytes + MULTIPART_OVERHEAD_BYTES
    if content_length is not None:
        declared = ascii_decimal(content_length)
        if declared is None:
            raise Malformed("bad_request", "Content-Length must be a decimal byte count")
        if declared > limit:
            raise upload_too_large(max_bytes)
    receiver = _Receiver(max_bytes)
    parser = MultipartParser(boundary, receiver.callbacks(), max_size=limit)  # type: ignore[arg-type]
    destination.parent.mkdir(parents=True, exist_ok=True)
    handle: BinaryIO = await asyncio.to_thread(destination.open, "wb")
    received = 0
    try:
        async for chunk in body:
            received += len(chunk)
            if received > limit:
                raise upload_too_large(max_bytes)
            try:
                parser.write(chunk)
            except DomainError:
                raise
            except Exception as exc:  # python-multipart's parse errors
                raise Invalid("invalid_multipart", f"the multipart body is malformed: {exc}") from exc
            if receiver.pending_bytes >= _FLUSH_BYTES:
                await asyncio.to_thread(handle.write, receiver.take_pending())
        parser.finalize()
        if not receiver.file_done:
            raise Invalid("file_missing", "the request has no complete 'file' part")
        await asyncio.to_thread(handle.write, receiver.take_pending())
    except BaseException:
        await asyncio.to_thread(_close_and_remove, handle, destination)
        raise
    await asyncio.to_thread(handle.close)
    return ReceivedFile(
        path=destination,
        filename=sanitize_filename(receiver.filename),
        size=receiver.size,
        sha256=receiver.digest.hexdigest(),
        conversation_id=receiver.fields.get(CONVERSATION_FIELD),
    )


def _close_and_remove(handle: BinaryIO, path: Path) -> None:
    handle.close()
    path.unlink(missing_ok=True)
