"""Byte counts as people read them: one formatter for previews, exports and messages (the
frontend's `formatBytes` reads the same)."""

from __future__ import annotations

_UNITS = ("KB", "MB", "GB")


def byte_size(size: int) -> str:
    """`size` bytes in binary units with one decimal: 512 B, 2.0 MB, 1.5 GB."""
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in _UNITS[:-1]:
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_UNITS[-1]}"
