"""Pages of text in tool results: what the paging tools (`read_attachment`, `read_message`)
share. A page is cut by the one text cutter so that the whole result, JSON envelope and
escaping included, fits the tool-output budget the guard applies: the guard never has to cut a
page, and paging stays contiguous."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from langchain_core.tools import ToolException

from chat_shell.accounting.text_counter import FETCH_CHARS_PER_TOKEN, TextCounter

T = TypeVar("T")

# How often one tool may be called in one turn (across its attempts).
DEFAULT_MAX_CALLS = 30
# What the guard adds around a tool message's content when it counts it (role, name, call id).
MESSAGE_OVERHEAD_TOKENS = 32
_FIT_ROUNDS = 4
_RETRY_AIM = 0.95
TOO_SMALL = "the tool-output budget is too small to return any text"


def chars_to_fetch(page_tokens: int, limit: int) -> int:
    """How many characters to read for a page of `page_tokens` (at most the model's `limit`)."""
    wanted = page_tokens * FETCH_CHARS_PER_TOKEN
    return min(wanted, limit) if limit else wanted


async def looked_up(lookup: Awaitable[T]) -> T:
    """What a lookup by id found; an unknown or foreign id is the model's error, told to it as
    the tool's result."""
    try:
        return await lookup
    except LookupError as exc:
        raise ToolException(str(exc)) from exc


def page_within(text: str, max_tokens: int, counter: TextCounter, render: Callable[[str], str]) -> str:
    """The longest prefix of `text` (ending at a line break when one is near) whose result,
    `render(prefix)`, counts at most `max_tokens`. A text of which not even a short page fits
    is a `ToolException`."""
    page = _fit(text, max_tokens, counter, render)
    if not page and text:
        raise ToolException(TOO_SMALL)
    return page


def _fit(text: str, max_tokens: int, counter: TextCounter, render: Callable[[str], str]) -> str:
    content = max_tokens - counter.count(render(""))
    room = content
    for _ in range(_FIT_ROUNDS):
        if room <= 0:
            return ""
        page = counter.head(text, room, lines=True)
        over = counter.count(render(page)) - max_tokens
        if over <= 0:
            return page
        # Escaping made the page dearer than its own count: shrink by the ratio it measured,
        # and a little more, so the next cut lands on an earlier line.
        room = int(counter.count(page) * content / (content + over) * _RETRY_AIM)
    return ""
