"""Where summary compaction cuts the view (SPEC 5.3): pure functions over cached counts.

The tail to keep is the longest suffix within a token budget, found by binary search over the
cumulative counts, moved forward to a safe boundary (never starting with a tool result, so no
call is separated from its results). The latest user message is always kept whole; the user
message before it, when it is not in the tail, stays too, shortened, where it fits.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage

from chat_shell.messages.markers import is_summary

# The previous user message, when it is not in the tail, is kept truncated to this share of keep.
PREVIOUS_USER_SHARE = 0.25
MIN_PREVIOUS_USER_TOKENS = 32


@dataclass(frozen=True)
class Split:
    """Indices into the view: `system` leading system messages, then what is summarized (one
    or two ranges, in order) and what is kept (in order)."""

    system: int
    summarized: list[range]
    kept: list[int]
    # The previous user message, kept truncated in front of the tail (None when not needed).
    previous_user: int | None
    previous_user_tokens: int


def _is_user(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) and not is_summary(message)


def _latest_user(messages: Sequence[BaseMessage], start: int, end: int) -> int | None:
    for index in range(end - 1, start - 1, -1):
        if _is_user(messages[index]):
            return index
    return None


def _tail_start(prefix: Sequence[int], lo: int, hi: int, budget: int, messages: Sequence[BaseMessage]) -> int:
    """The earliest index `s` in [lo, hi] with tokens[s:hi] ≤ budget (binary search over the
    cumulative counts `prefix`), moved forward past tool results so no pair is split."""
    start = bisect.bisect_left(prefix, prefix[hi] - budget, lo, hi + 1)
    while start < hi and isinstance(messages[start], ToolMessage):
        start += 1
    return start


def split_view(
    messages: Sequence[BaseMessage],
    tokens: Sequence[int],
    tail_budget: int,
    keep: int,
    *,
    whole_last_turn: bool = False,
) -> Split:
    """Where to cut the view (pure; O(n) for the cumulative counts, O(log n) for the cut).
    `whole_last_turn`: the latest user message and everything after it are kept whatever the
    budget (a compaction ahead of time keeps the finished turn the user just read)."""
    system = 0
    while (
        system < len(messages)
        and isinstance(messages[system], SystemMessage)
        and not is_summary(messages[system])
    ):
        system += 1
    end = len(messages)
    prefix = list(itertools.accumulate(tokens, initial=0))
    budget = max(0, tail_budget)
    start = _tail_start(prefix, system, end, budget, messages)
    latest = _latest_user(messages, system, end)
    if whole_last_turn and latest is not None:
        start = min(start, latest)
    if latest is None or latest >= start:
        kept = list(range(start, end))
        summarized = [range(system, start)]
    else:
        # The latest user message is always kept whole; the rest of the budget goes to what
        # follows it (the current turn's tool rounds).
        rest = _tail_start(prefix, latest + 1, end, max(0, budget - tokens[latest]), messages)
        kept = [latest, *range(rest, end)]
        summarized = [range(system, latest), range(latest + 1, rest)]
    summarized = [part for part in summarized if part]
    previous_user, previous_tokens = None, 0
    if latest is not None and summarized:
        # Where it fits, the user message before the latest one stays too, shortened.
        previous = _latest_user(messages, system, latest)
        room = min(int(keep * PREVIOUS_USER_SHARE), budget - sum(tokens[i] for i in kept))
        if previous is not None and previous < kept[0] and room >= MIN_PREVIOUS_USER_TOKENS:
            previous_user, previous_tokens = previous, min(room, tokens[previous])
    return Split(system, summarized, kept, previous_user, previous_tokens)
