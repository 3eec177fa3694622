"""Turn capabilities: what lets a remote chat_shell read one conversation for one turn.

In service mode the backend mints, per turn, a token scoped to (turn, conversation, owner,
expiry) and sends it in the `TurnRequest`. The token reads that conversation's model history,
its user-visible messages and its attachments' text and images, and nothing else; it carries no user
credential, and it stops working the moment its turn is no longer running. Format:
`cst2.<turn>.<conversation>.<owner>.<expires unix s>.<mac>`, the mac HMAC-SHA256 under the
capability key (`CHAT_SHELL_CAPABILITY_KEY`): a secret of its own, which the chat_shell service
never holds, so neither the service token nor the service can mint one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import time
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Conversation, Turn, TurnStatus
from backend.services.conversations import conversations
from backend.services.decimals import ascii_decimal
from backend.services.errors import NotFound, Unauthenticated
from chat_shell.contracts import BackendAccess

PREFIX = "cst2."
_FIELDS = 4


class InvalidCapability(Unauthenticated):
    """Malformed, tampered with, signed with another key, expired, or its turn has ended."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_capability", message)


@dataclass(frozen=True)
class Capability:
    turn_id: int
    conversation_id: int
    owner_id: int
    expires_at: int


def _mac(key: bytes, payload: str) -> str:
    digest = hmac.new(key, payload.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def mint(key: bytes, grant: Capability) -> str:
    payload = f"{grant.turn_id}.{grant.conversation_id}.{grant.owner_id}.{grant.expires_at}"
    return f"{PREFIX}{payload}.{_mac(key, payload)}"


def is_capability(secret: str) -> bool:
    return secret.startswith(PREFIX)


def verify(key: bytes, token: str, now: float | None = None) -> Capability:
    """The grant of a well-formed, untampered, unexpired token (its turn is not checked here)."""
    payload, _, mac = token.removeprefix(PREFIX).rpartition(".")
    if not token.startswith(PREFIX) or not hmac.compare_digest(_mac(key, payload).encode(), mac.encode()):
        raise InvalidCapability("the capability is not valid")
    values = [ascii_decimal(part) for part in payload.split(".")]
    fields = [value for value in values if value is not None]
    if len(values) != _FIELDS or len(fields) != _FIELDS:
        raise InvalidCapability("the capability is not valid")
    turn_id, conversation_id, owner_id, expires_at = fields
    if expires_at <= (time.time() if now is None else now):
        raise InvalidCapability("the capability has expired")
    return Capability(turn_id, conversation_id, owner_id, expires_at)


async def granted_conversation(
    db: AsyncSession, key: bytes, token: str, conversation_id: int
) -> Conversation:
    """The conversation `token` grants, if it is `conversation_id` (any other answers like a
    missing one) and the turn it was minted for is still running there."""
    grant = verify(key, token)
    if grant.conversation_id != conversation_id:
        raise NotFound.of("conversation")
    turn = await db.get(Turn, grant.turn_id)
    if turn is None or turn.conversation_id != conversation_id or turn.status != TurnStatus.RUNNING:
        raise InvalidCapability("the turn this capability was issued for has ended")
    return await conversations.get_for_owner(db, grant.owner_id, conversation_id)


class CapabilityIssuer:
    """Mints the `BackendAccess` of each turn in service mode, valid for `lifetime_seconds` (the
    turn's wall-time limit, rounded up to the whole second the grant states) and only while the
    turn runs."""

    def __init__(self, key: bytes, base_url: str, lifetime_seconds: int) -> None:
        self._key = key
        self._base_url = base_url.rstrip("/")
        self._lifetime = lifetime_seconds

    def access(self, turn_id: int, conversation_id: int, owner_id: int) -> BackendAccess:
        # Rounded up: truncating would cut up to a second off, all of a 1 s limit.
        expires_at = math.ceil(time.time() + self._lifetime)
        grant = Capability(turn_id, conversation_id, owner_id, expires_at)
        return BackendAccess(base_url=self._base_url, capability=mint(self._key, grant))
