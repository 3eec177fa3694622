"""The retention score of a summary (SPEC 5.3): the share of the numbers and identifiers of the
summarized input that the summary repeats."""

from __future__ import annotations

import re
from collections.abc import Sequence

_DIGIT = re.compile(r"\d")
_FACT = re.compile(r"[A-Za-z_][\w./-]*\d[\w./-]*|\d[\d,.:/-]*\d|\d")


def facts(text: str) -> set[str]:
    """Numbers and identifiers (anything holding a digit) in `text`."""
    # Most text holds no digit at all: one C-level scan rules it out.
    return set(_FACT.findall(text)) if _DIGIT.search(text) else set()


def retention_score(sources: Sequence[str], summary: str) -> float | None:
    """The share of the numbers and identifiers of `sources` that the summary repeats."""
    wanted: set[str] = set()
    for text in sources:
        wanted |= facts(text)
    if not wanted:
        return None
    return round(sum(1 for fact in wanted if fact in summary) / len(wanted), 4)
