"""Turn capabilities: what lets a remote chat_shell read one conversation for one turn.

In service mode the backend mints, per turn, a token scoped to (conversation, owner, expiry)
and sends it in the `TurnRequest`. The token reads that conversation's model history, its
user-visible messages and its attachments' text, and nothing else; it carries no user
credential. Format: `cst1.<conversation>.<owner>.<expires unix s>.<mac>`, where the mac is
HMAC-SHA256 under a key derived from the service token (so the service token itself never
signs anything a client sees).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass

from chat_shell.contracts import BackendAccess

PREFIX = "cst1."
_KEY_LABEL = b"chat-shell turn capability v1"


class InvalidCapability(Exception):
    """Malformed, tampered with, signed with another key, or expired."""


@dataclass(frozen=True)
class Capability:
    conversation_id: int
    owner_id: int
    expires_at: int


def derive_key(service_token: str) -> bytes:
    return hmac.new(service_token.encode(), _KEY_LABEL, hashlib.sha256).digest()


def _mac(key: bytes, payload: str) -> str:
    digest = hmac.new(key, payload.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def mint(key: bytes, grant: Capability) -> str:
    payload = f"{grant.conversation_id}.{grant.owner_id}.{grant.expires_at}"
    return f"{PREFIX}{payload}.{_mac(key, payload)}"


def is_capability(secret: str) -> bool:
    return secret.startswith(PREFIX)


def verify(key: bytes, token: str, now: float | None = None) -> Capability:
    payload, _, mac = token.removeprefix(PREFIX).rpartition(".")
    if not token.startswith(PREFIX) or not hmac.compare_digest(_mac(key, payload).encode(), mac.encode()):
        raise InvalidCapability("the capability is not valid")
    conversation_id, owner_id, expires_at = (int(part) for part in payload.split("."))
    if expires_at <= (time.time() if now is None else now):
        raise InvalidCapability("the capability has expired")
    return Capability(conversation_id, owner_id, expires_at)


class CapabilityIssuer:
    """Mints the `BackendAccess` of each turn in service mode."""

    def __init__(self, service_token: str, base_url: str, lifetime_seconds: int) -> None:
        self._key = derive_key(service_token)
        self._base_url = base_url.rstrip("/")
        self._lifetime = lifetime_seconds

    def access(self, conversation_id: int, owner_id: int) -> BackendAccess:
        grant = Capability(conversation_id, owner_id, int(time.time()) + self._lifetime)
        return BackendAccess(base_url=self._base_url, capability=mint(self._key, grant))
