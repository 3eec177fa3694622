"""Path and query parameters shared by the routes: ids within their columns' range."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Query

from backend.models.base import MAX_BIG_ID, MAX_INT
from chat_shell.contracts import MAX_TEXT_PAGE_CHARS

# Character offsets into a text (code points).
MAX_OFFSET = 2**62

ConversationId = Annotated[int, Path(ge=1, le=MAX_BIG_ID)]
AttachmentId = Annotated[int, Path(ge=1, le=MAX_BIG_ID)]
TokenId = Annotated[int, Path(ge=1, le=MAX_BIG_ID)]
PresetId = Annotated[int, Path(ge=1, le=MAX_BIG_ID)]
SessionId = Annotated[int, Path(ge=1, le=MAX_BIG_ID)]
UserId = Annotated[int, Path(ge=1, le=MAX_BIG_ID)]
InviteId = Annotated[int, Path(ge=1, le=MAX_BIG_ID)]
MessageId = Annotated[int, Path(ge=1, le=MAX_INT)]
BeforeMessageId = Annotated[int | None, Query(ge=1, le=MAX_INT)]
TurnIdQuery = Annotated[int | None, Query(ge=1, le=MAX_BIG_ID)]
# An event's `seq` within its turn (a 32-bit column).
AfterSeq = Annotated[int | None, Query(ge=0, le=MAX_INT, description="the last seq already received")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


@dataclass(frozen=True)
class TextWindow:
    """Which characters of a text to read: `limit` of them from `offset`."""

    offset: int
    limit: int


def text_window(
    offset: Offset = 0, limit: Annotated[int, Query(ge=0, le=MAX_TEXT_PAGE_CHARS)] = 20_000
) -> TextWindow:
    return TextWindow(offset, limit)


TextPage = Annotated[TextWindow, Depends(text_window)]
