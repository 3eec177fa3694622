"""Bodies of the message search endpoint."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class SnippetOut(BaseModel):
    """The text around the first match; `match` is what the page highlights."""

    before: str
    match: str
    after: str


class SearchHit(BaseModel):
    conversation_id: int
    conversation_title: str
    message_id: int
    role: str
    created_at: datetime
    snippet: SnippetOut


class SearchResults(BaseModel):
    items: list[SearchHit]
