"""Cutting text to a token budget without splitting characters, preferring line boundaries.

Python strings index code points, so every cut here falls between characters (never inside a
UTF-8 sequence, the bug of decoding a token-clamped prefix). Fitting counts a sample to learn the
text's density, then counts the candidate once; a second count happens only when the density
guess was wrong. Each result is verified with the real counter, so it never exceeds the budget.
"""

from __future__ import annotations

from collections.abc import Callable

TokenCounter = Callable[[str], int]
Measure = Callable[[str], str]

_SAMPLE_CHARS = 4096
_AIM = 0.95  # aim a little under the budget so the first exact count usually fits
_SNAP_WINDOW = 0.2  # move a cut to a line boundary found within the last 20% of the piece
_MAX_ROUNDS = 8


def _identity(text: str) -> str:
    return text


def fit_prefix(
    text: str, max_tokens: int, count: TokenCounter, measure: Measure = _identity
) -> tuple[str, int]:
    """The longest-ish prefix of `text` whose `measure`d form counts at most `max_tokens`, and
    that count."""
    if max_tokens <= 0 or not text:
        return "", 0
    sample = text[: _sample_chars(max_tokens)]
    sample_tokens = count(measure(sample))
    if len(sample) == len(text) and sample_tokens <= max_tokens:
        return text, sample_tokens
    density = max(sample_tokens, 1) / len(sample)
    cut = min(len(text), int(max_tokens * _AIM / density))
    for _ in range(_MAX_ROUNDS):
        candidate = _snap_end(text, cut)
        tokens = count(measure(candidate))
        if tokens <= max_tokens:
            return candidate, tokens
        cut = int(len(candidate) * max_tokens / tokens * _AIM)
        if cut <= 0:
            break
    return "", 0


def fit_suffix(
    text: str, max_tokens: int, count: TokenCounter, measure: Measure = _identity
) -> tuple[str, int]:
    """The longest-ish suffix of `text` whose `measure`d form counts at most `max_tokens`, and
    that count."""
    if max_tokens <= 0 or not text:
        return "", 0
    sample = text[-_sample_chars(max_tokens) :]
    sample_tokens = count(measure(sample))
    if len(sample) == len(text) and sample_tokens <= max_tokens:
        return text, sample_tokens
    density = max(sample_tokens, 1) / len(sample)
    keep = min(len(text), int(max_tokens * _AIM / density))
    for _ in range(_MAX_ROUNDS):
        candidate = _snap_start(text, keep)
        tokens = count(measure(candidate))
        if tokens <= max_tokens:
            return candidate, tokens
        keep = int(len(candidate) * max_tokens / tokens * _AIM)
        if keep <= 0:
            break
    return "", 0


def _sample_chars(max_tokens: int) -> int:
    # About the size of the answer for ordinary text, so a short text is often done in one count.
    return max(256, min(_SAMPLE_CHARS, 3 * max_tokens))


def _snap_end(text: str, cut: int) -> str:
    """`text[:cut]`, shortened to end after a newline when one is near the cut."""
    if cut >= len(text):
        return text
    newline = text.rfind("\n", int(cut * (1 - _SNAP_WINDOW)), cut)
    return text[: newline + 1] if newline >= 0 else text[:cut]


def _snap_start(text: str, keep: int) -> str:
    """The last `keep` characters, shortened to start after a newline when one is near."""
    if keep >= len(text):
        return text
    start = len(text) - keep
    newline = text.find("\n", start, start + int(keep * _SNAP_WINDOW))
    return text[newline + 1 :] if newline >= 0 else text[start:]
