"""Full-text search over the text of the user's own messages."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query

from backend.api.deps import CurrentUser, Db
from backend.schemas.search import SearchHit, SearchResults
from backend.services import search as message_search

router = APIRouter(prefix="/api/search", tags=["search"])


@router.get("", response_model=SearchResults)
async def search_messages(
    user: CurrentUser,
    db: Db,
    q: Annotated[str, Query(description="text to find (any characters, taken literally)")] = "",
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> SearchResults:
    hits = await message_search.search(db, user, q, limit)
    return SearchResults(items=[SearchHit.model_validate(asdict(hit)) for hit in hits])
