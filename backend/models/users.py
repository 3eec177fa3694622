"""Accounts and their credentials: users, browser sessions, API tokens, invite codes, and the
operators' audit log of what was done to them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, String, func, text
from sqlalchemy.orm import Mapped, mapped_column

from backend.models.base import Base, BigId, UtcDateTime, utcnow


class User(Base):
    __tablename__ = "users"
    # One account per name whatever its case: "Alice" and "alice" are the same name.
    __table_args__ = (Index("uq_users_username_lower", func.lower(text("username")), unique=True),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    is_operator: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # Set by an operator: the account cannot log in and none of its credentials authenticate.
    disabled_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # The page's language as the user picked it (a tag of `backend.i18n`); None follows the browser.
    language: Mapped[str | None] = mapped_column(String(16), nullable=True)


class _Credential:
    """What a credential of one account holds: only the SHA-256 of its secret is stored, and it
    goes with the account."""

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Session(_Credential, Base):
    """A browser login; its secret is the cookie value."""

    __tablename__ = "sessions"

    csrf_token: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_seen_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    user_agent: Mapped[str | None] = mapped_column(String(255), nullable=True)


class ApiToken(_Credential, Base):
    """A bearer token for programmatic use."""

    __tablename__ = "api_tokens"

    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(16))
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class InviteCode(Base):
    """An operator-made code that lets one person register (`CHAT_SHELL_REGISTRATION=invite`).
    Only the SHA-256 of the code is stored; it is spent by the account it created."""

    __tablename__ = "invite_codes"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())
    used_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    used_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class AuditEvent(Base):
    """One operator action on an account or an invite code. Names are copied as they were, so
    the record reads the same after an account is renamed or deleted; a null actor is the
    `chat-shell` command line."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    actor_name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    action: Mapped[str] = mapped_column(String(40))
    target_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    target_name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    detail: Mapped[str | None] = mapped_column(String(200), nullable=True)
