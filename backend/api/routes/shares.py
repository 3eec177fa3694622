"""Read-only share links (issue 22): the owner makes, lists and revokes them; anyone with a
link reads what it shows (`GET /api/shares/{share_token}`, no account; the page is
`/s/{share_token}`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from backend.api.deps import CurrentUser, Db
from backend.api.params import ConversationId
from backend.schemas.shares import NewShare, SharedConversation, ShareList, ShareOut
from backend.services import shares
from backend.services.conversations import conversations

router = APIRouter(tags=["shares"])
# Tokens are `secrets.token_urlsafe(32)`: 43 characters of the URL-safe alphabet.
ShareToken = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


SHARES = "/api/conversations/{conversation_id}/shares"


@router.post(SHARES, status_code=status.HTTP_201_CREATED, response_model=ShareOut)
async def create_share(
    conversation_id: ConversationId, body: NewShare, user: CurrentUser, db: Db
) -> ShareOut:
    """A link to the conversation's current path as it ends now."""
    conversation = await conversations.get_owned(db, user, conversation_id)
    link = await shares.create(db, conversation, include_attachments=body.include_attachments)
    return ShareOut.model_validate(link)


@router.get(SHARES, response_model=ShareList)
async def list_shares(conversation_id: ConversationId, user: CurrentUser, db: Db) -> ShareList:
    conversation = await conversations.get_owned(db, user, conversation_id)
    return ShareList(items=[ShareOut.model_validate(link) for link in await shares.active(db, conversation)])


@router.delete("/api/shares/{share_token}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_share(share_token: ShareToken, user: CurrentUser, db: Db) -> None:
    await shares.revoke(db, user, share_token)


@router.get("/api/shares/{share_token}", response_model=SharedConversation)
async def read_share(share_token: ShareToken, db: Db) -> SharedConversation:
    """What the link shows; needs no account."""
    return await shares.shared(db, share_token)
