"""Extracted text on disk, readable by character offset in time proportional to the page.

An extract is stored as UTF-8 (`extract.txt`, compact and greppable by an operator) plus a
sparse index (`extract.idx`): the byte offset of every `STRIDE`-th character. Reading the
characters `[offset, offset + limit)` seeks to the checkpoint at or before `offset` and decodes
at most `STRIDE + limit` characters, whatever the offset. Small extracts never reach the disk:
they stay in memory and end up in the database row.
"""

from __future__ import annotations

import codecs
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

STRIDE = 4096
_HEADER = struct.Struct("<Q")  # the stride the index was written with
_ENTRY = struct.Struct("<Q")
TEXT_NAME = "extract.txt"
INDEX_NAME = "extract.idx"
# Up to this many characters an extract stays in the database row.
INLINE_MAX_CHARS = 65_536


@dataclass(frozen=True)
class StoredExtract:
    chars: int
    truncated: bool
    inline_text: str | None  # the whole text when small
    text_path: Path | None  # the extract file when large (its index sits beside it)


class ExtractWriter:
    """Collects extracted text up to `max_chars`; spills to an indexed file when it grows large.

    `write` returns False once the limit is reached, so parsers can stop early.
    """

    def __init__(self, directory: Path, max_chars: int, inline_max_chars: int = INLINE_MAX_CHARS) -> None:
        self._directory = directory
        self._max_chars = max_chars
        self._inline_max = inline_max_chars
        self._buffer: list[str] = []
        self._chars = 0
        self._bytes = 0
        self._truncated = False
        self._text_file: BinaryIO | None = None
        self._index_file: BinaryIO | None = None

    @property
    def chars(self) -> int:
        return self._chars

    @property
    def full(self) -> bool:
        return self._truncated

    def write(self, text: str) -> bool:
        if self._truncated:
            return False
        text = _storable(text)
        room = self._max_chars - self._chars
        if len(text) > room:
            text = text[:room]
            self._truncated = True
        if not text:
            return not self._truncated
        if self._text_file is None and self._chars + len(text) <= self._inline_max:
            self._buffer.append(text)
            self._chars += len(text)
        else:
            if self._text_file is None:
                self._spill()
            self._append(text)
        return not self._truncated

    def _spill(self) -> None:
        self._directory.mkdir(parents=True, exist_ok=True)
        self._text_file = (self._directory / TEXT_NAME).open("wb")
        self._index_file = (self._directory / INDEX_NAME).open("wb")
        self._index_file.write(_HEADER.pack(STRIDE))
        self._index_file.write(_ENTRY.pack(0))
        buffered, self._buffer, self._chars = "".join(self._buffer), [], 0
        self._append(buffered)

    def _append(self, text: str) -> None:
        assert self._text_file is not None and self._index_file is not None
        while text:
            room = STRIDE - self._chars % STRIDE
            piece, text = text[:room], text[room:]
            data = piece.encode("utf-8")
            self._text_file.write(data)
            self._bytes += len(data)
            self._chars += len(piece)
            if self._chars % STRIDE == 0:
                self._index_file.write(_ENTRY.pack(self._bytes))

    def close(self) -> StoredExtract:
        if self._text_file is None:
            return StoredExtract(self._chars, self._truncated, "".join(self._buffer), None)
        assert self._index_file is not None
        self._text_file.close()
        self._index_file.close()
        return StoredExtract(self._chars, self._truncated, None, self._directory / TEXT_NAME)

    def discard(self) -> None:
        for handle in (self._text_file, self._index_file):
            if handle is not None:
                handle.close()
        remove_extract(self._directory)


def remove_extract(directory: Path) -> None:
    """Delete an extract's files from `directory` (also what a killed worker left half-written)."""
    for name in (TEXT_NAME, INDEX_NAME):
        (directory / name).unlink(missing_ok=True)


def _storable(text: str) -> str:
    """Text every store accepts: PostgreSQL TEXT refuses NUL, UTF-8 refuses lone surrogates.

    Each bad character becomes exactly one replacement character, so counts stay true.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def index_path(text_path: Path) -> Path:
    return text_path.with_name(INDEX_NAME)


def read_chars(text_path: Path, offset: int, limit: int) -> str:
    """Characters `[offset, offset + limit)` of an indexed extract file (fewer at its end)."""
    if limit <= 0:
        return ""
    with index_path(text_path).open("rb") as index:
        (stride,) = _HEADER.unpack(index.read(_HEADER.size))
        index.seek(_HEADER.size + (offset // stride) * _ENTRY.size)
        entry = index.read(_ENTRY.size)
        if len(entry) < _ENTRY.size:
            return ""  # past the last checkpoint: past the end of the text
        (start_byte,) = _ENTRY.unpack(entry)
    skip = offset % stride
    wanted = skip + limit
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts: list[str] = []
    have = 0
    with text_path.open("rb") as text:
        text.seek(start_byte)
        # A character is at most 4 bytes, so this many bytes always hold `wanted` characters
        # (when the file has them); the decoder keeps a split trailing character for later.
        while have < wanted:
            data = text.read(max(4 * (wanted - have), 64))
            if not data:
                break
            chunk = decoder.decode(data)
            parts.append(chunk)
            have += len(chunk)
    return "".join(parts)[skip:wanted]
