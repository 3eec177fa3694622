"""Accounts: password hashing, browser sessions and API tokens."""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from argon2 import PasswordHasher, profiles
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from backend.api.errors import ApiError, not_found
from backend.models import ApiToken, Session, User
from backend.models.base import utcnow

USERNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{2,63}$")
MIN_PASSWORD = 8
_COMMON_PASSWORDS = frozenset(
    {
        "password",
        "password1",
        "12345678",
        "123456789",
        "1234567890",
        "qwertyui",
        "qwerty123",
        "11111111",
        "00000000",
        "abcdefgh",
        "iloveyou",
        "letmein1",
        "passw0rd",
        "admin123",
    }
)
TOKEN_PREFIX = "cs_"


class Passwords:
    """argon2id hashing. Hashing is slow on purpose, so it runs off the event loop."""

    def __init__(self, profile: str = "RFC_9106_LOW_MEMORY") -> None:
        self._hasher = PasswordHasher.from_parameters(getattr(profiles, profile))
        # Verified against when the username is unknown, so both failures cost the same.
        self._dummy = self._hasher.hash("not-a-real-password")

    async def hash(self, password: str) -> str:
        return await asyncio.to_thread(self._hasher.hash, password)

    async def verify(self, stored: str | None, password: str) -> bool:
        try:
            return await asyncio.to_thread(self._hasher.verify, stored or self._dummy, password) and bool(
                stored
            )
        except (VerificationError, InvalidHashError):
            return False

    def needs_rehash(self, stored: str) -> bool:
        return self._hasher.check_needs_rehash(stored)


def token_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_new_credentials(username: str, password: str) -> None:
    if not USERNAME_RE.fullmatch(username):
        raise ApiError(
            422, "invalid_username", "username must be 3-64 characters: letters, digits, '_', '.', '-'"
        )
    if len(password) < MIN_PASSWORD:
        raise ApiError(422, "weak_password", f"password must be at least {MIN_PASSWORD} characters")
    if (
        password.lower() in _COMMON_PASSWORDS
        or password.lower() == username.lower()
        or len(set(password)) < 4
    ):
        raise ApiError(422, "weak_password", "password is too easy to guess")


async def create_user(
    db: AsyncSession, passwords: Passwords, username: str, password: str, *, operator: bool = False
) -> User:
    check_new_credentials(username, password)
    user = User(username=username, password_hash=await passwords.hash(password), is_operator=operator)
    db.add(user)
    try:
        async with db.begin_nested():
            await db.flush()
    except IntegrityError:
        raise ApiError(409, "username_taken", "that username is already taken") from None
    return user


async def authenticate(db: AsyncSession, passwords: Passwords, username: str, password: str) -> User:
    user = await db.scalar(select(User).where(User.username == username))
    if not await passwords.verify(user.password_hash if user else None, password) or user is None:
        raise ApiError(401, "invalid_credentials", "wrong username or password")
    if passwords.needs_rehash(user.password_hash):
        user.password_hash = await passwords.hash(password)
    return user


@dataclass(frozen=True)
class NewSession:
    cookie_value: str
    csrf_token: str
    expires_at: datetime


async def open_session(db: AsyncSession, user: User, days: int) -> NewSession:
    cookie_value = secrets.token_urlsafe(32)
    csrf_token = secrets.token_urlsafe(24)
    expires_at = utcnow() + timedelta(days=days)
    db.add(
        Session(
            user_id=user.id,
            token_hash=token_digest(cookie_value),
            csrf_token=csrf_token,
            expires_at=expires_at,
        )
    )
    await db.flush()
    return NewSession(cookie_value, csrf_token, expires_at)


async def session_user(db: AsyncSession, cookie_value: str) -> tuple[User, Session] | None:
    row = (
        await db.execute(
            select(User, Session)
            .join(Session, Session.user_id == User.id)
            .where(Session.token_hash == token_digest(cookie_value), Session.expires_at > utcnow())
        )
    ).first()
    return (row[0], row[1]) if row else None


async def close_session(db: AsyncSession, session: Session) -> None:
    await db.delete(session)


@dataclass(frozen=True)
class NewToken:
    token: ApiToken
    secret: str


async def create_token(db: AsyncSession, user: User, name: str, expires_in_days: int | None) -> NewToken:
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires_at = utcnow() + timedelta(days=expires_in_days) if expires_in_days else None
    token = ApiToken(
        user_id=user.id, name=name, prefix=secret[:10], token_hash=token_digest(secret), expires_at=expires_at
    )
    db.add(token)
    await db.flush()
    return NewToken(token, secret)


async def list_tokens(db: AsyncSession, user: User) -> list[ApiToken]:
    rows = await db.scalars(select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id.desc()))
    return list(rows)


async def revoke_token(db: AsyncSession, user: User, token_id: int) -> ApiToken:
    token = await db.scalar(select(ApiToken).where(ApiToken.id == token_id, ApiToken.user_id == user.id))
    if token is None:
        raise not_found("token")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    return token


async def token_user(db: AsyncSession, secret: str) -> User | None:
    now = utcnow()
    row = (
        await db.execute(
            select(User, ApiToken)
            .join(ApiToken, ApiToken.user_id == User.id)
            .where(ApiToken.token_hash == token_digest(secret), ApiToken.revoked_at.is_(None))
        )
    ).first()
    if row is None:
        return None
    user, token = row
    if token.expires_at is not None and token.expires_at <= now:
        return None
    # Coarse last-use tracking: at most one write per token per minute.
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        await db.execute(update(ApiToken).where(ApiToken.id == token.id).values(last_used_at=now))
    return user
