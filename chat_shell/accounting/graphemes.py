"""Grapheme-cluster boundaries near a cut point, so truncation never splits what a reader
sees as one character (a CJK ideograph, an emoji ZWJ sequence or flag, a base letter with its
combining marks in Arabic or Hebrew text).

Only a small window around the cut is segmented, so the cost does not depend on text length.
"""

from __future__ import annotations

import regex

_CLUSTER = regex.compile(r"\X")
# Wide enough to resynchronize the segmentation before the cut in any real text.
_WINDOW = 64


def _cluster_at(text: str, index: int) -> tuple[int, int] | None:
    """The start and end of the grapheme cluster that holds `index` (0 < index < len)."""
    for match in _CLUSTER.finditer(text, max(0, index - _WINDOW), min(len(text), index + _WINDOW)):
        if match.end() > index:
            return match.start(), match.end()
    return None


def floor_boundary(text: str, index: int) -> int:
    """The largest grapheme boundary at or before `index`."""
    if index <= 0 or index >= len(text):
        return max(0, min(index, len(text)))
    cluster = _cluster_at(text, index)
    return cluster[0] if cluster is not None else index


def ceil_boundary(text: str, index: int) -> int:
    """The smallest grapheme boundary at or after `index`."""
    if index <= 0 or index >= len(text):
        return max(0, min(index, len(text)))
    cluster = _cluster_at(text, index)
    if cluster is None:
        return index
    start, end = cluster
    return index if start == index else end
