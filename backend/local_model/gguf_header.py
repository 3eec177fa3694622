"""Reads the metadata keys at the start of a GGUF file (format versions 2 and 3).

Only scalar and string values are kept; arrays (the tokenizer's vocabulary) are skipped, and
reading stops once the wanted keys are found. `gguf.GGUFReader` parses every array into numpy
objects first: 7 s for the Qwen file's 151k-token vocabulary, against milliseconds here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# Fixed-size value types: struct format by GGUF type id.
_SCALARS = {
    **{0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?"},
    **{10: "<Q", 11: "<q", 12: "<d"},
}
# A key or string longer than this means a corrupt file, not a real one.
_MAX_STRING = 1 << 24

Value = int | float | bool | str


class GgufError(ValueError):
    """The file is not a readable GGUF file."""


def _read(handle: BinaryIO, size: int) -> bytes:
    data = handle.read(size)
    if len(data) != size:
        raise GgufError("the file ends inside its metadata (truncated)")
    return data


def _unpack(handle: BinaryIO, fmt: str) -> int | float | bool:
    return struct.unpack(fmt, _read(handle, struct.calcsize(fmt)))[0]


def _string(handle: BinaryIO) -> str:
    length = int(_unpack(handle, "<Q"))
    if length > _MAX_STRING:
        raise GgufError(f"a metadata string claims {length} bytes (corrupt)")
    return _read(handle, length).decode("utf-8", errors="replace")


def _skip(handle: BinaryIO, kind: int) -> None:
    if kind == _STRING:
        handle.seek(int(_unpack(handle, "<Q")), 1)
    elif kind == _ARRAY:
        item, count = int(_unpack(handle, "<I")), int(_unpack(handle, "<Q"))
        if item in _SCALARS:
            handle.seek(count * struct.calcsize(_SCALARS[item]), 1)
        else:
            for _ in range(count):
                _skip(handle, item)
    elif kind in _SCALARS:
        handle.seek(struct.calcsize(_SCALARS[kind]), 1)
    else:
        raise GgufError(f"unknown metadata value type {kind} (corrupt)")


def read_metadata(path: Path, wanted: Iterable[str]) -> dict[str, Value]:
    """The wanted keys' values (a key the file lacks is absent). Raises GgufError when the
    file is not GGUF or its metadata is cut short or malformed."""
    keys = set(wanted)
    found: dict[str, Value] = {}
    with path.open("rb") as handle:
        if handle.read(len(MAGIC)) != MAGIC:
            raise GgufError("it does not start with the GGUF signature")
        version = int(_unpack(handle, "<I"))
        if version not in (2, 3):
            raise GgufError(f"GGUF version {version} is not supported")
        _unpack(handle, "<Q")  # tensor count
        for _ in range(int(_unpack(handle, "<Q"))):
            if keys <= found.keys():
                break
            key = _string(handle)
            kind = int(_unpack(handle, "<I"))
            if key in keys and kind == _STRING:
                found[key] = _string(handle)
            elif key in keys and kind in _SCALARS:
                found[key] = _unpack(handle, _SCALARS[kind])
            else:
                _skip(handle, kind)
    return found
