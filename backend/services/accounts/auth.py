"""Accounts: password hashing, registration (open, by invite, closed), browser sessions and API tokens.

A disabled account (`users.disabled_at`, set by an operator: `backend.services.accounts.admin`)
cannot log in, and neither its sessions nor its tokens authenticate."""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeVar

from argon2 import PasswordHasher, profiles
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import ColumnElement, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend import i18n
from backend.models import ApiToken, InviteCode, Session, User
from backend.models.base import utcnow
from backend.services.errors import Conflict, Forbidden, Invalid, NotFound, Unauthenticated

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
INVITE_PREFIX = "inv_"
RegistrationMode = Literal["open", "invite", "closed"]
# Hashes computed at once; each holds the profile's memory (64 MiB for RFC_9106_LOW_MEMORY).
HASH_THREADS = 2
# What of a browser's User-Agent header a session keeps (shown on the account page).
USER_AGENT_CHARS = 255


class Passwords:
    """argon2id hashing. Hashing is slow on purpose, so it runs off the event loop, on threads of
    its own: a login never queues behind extraction or other work of the default thread pool,
    and at most `HASH_THREADS` hashes hold their memory at once."""

    def __init__(self, profile: str = "RFC_9106_LOW_MEMORY") -> None:
        self._hasher = PasswordHasher.from_parameters(getattr(profiles, profile))
        # Verified against when the username is unknown, so both failures cost the same.
        self._dummy = self._hasher.hash("not-a-real-password")
        self._threads = ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="argon2")

    async def hash(self, password: str) -> str:
        return await asyncio.get_running_loop().run_in_executor(self._threads, self._hasher.hash, password)

    async def verify(self, stored: str | None, password: str) -> bool:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                self._threads, self._hasher.verify, stored or self._dummy, password
            ) and bool(stored)
        except (VerificationError, InvalidHashError):
            return False

    def close(self) -> None:
        self._threads.shutdown()

    def needs_rehash(self, stored: str) -> bool:
        return self._hasher.check_needs_rehash(stored)


def token_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_new_credentials(username: str, password: str) -> None:
    if not USERNAME_RE.fullmatch(username):
        raise Invalid("invalid_username", "username must be 3-64 characters: letters, digits, '_', '.', '-'")
    if len(password) < MIN_PASSWORD:
        raise Invalid("weak_password", f"password must be at least {MIN_PASSWORD} characters")
    if (
        password.lower() in _COMMON_PASSWORDS
        or password.lower() == username.lower()
        or len(set(password)) < 4
    ):
        raise Invalid("weak_password", "password is too easy to guess")


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
        raise Conflict("username_taken", "that username is already taken") from None
    return user


def username_key(username: str) -> str:
    """What makes two usernames the same account name: "Alice" and "alice" are one."""
    return username.lower()


@dataclass(frozen=True)
class NewInvite:
    code: str
    expires_at: datetime


async def create_invite(db: AsyncSession, days: int) -> NewInvite:
    """An invite code for one registration, valid `days`; only its digest is stored."""
    code = INVITE_PREFIX + secrets.token_urlsafe(18)
    expires_at = utcnow() + timedelta(days=days)
    db.add(InviteCode(code_hash=token_digest(code), expires_at=expires_at))
    await db.flush()
    return NewInvite(code, expires_at)


async def register(
    db: AsyncSession,
    passwords: Passwords,
    mode: RegistrationMode,
    username: str,
    password: str,
    invite_code: str | None,
) -> User:
    """A new account as the registration mode allows: anyone, an unspent invite code's holder
    (the code is spent with it, atomically), or nobody."""
    if mode == "closed":
        raise Forbidden("registration_closed", "registration is closed; ask an operator for an account")
    invite = None
    if mode == "invite":
        if not invite_code:
            raise Forbidden("invite_required", "registration needs an invite code from an operator")
        invite = await db.scalar(
            select(InviteCode)
            .where(InviteCode.code_hash == token_digest(invite_code.strip()), InviteCode.used_at.is_(None))
            .with_for_update()
        )
        if invite is None or invite.expires_at <= utcnow():
            raise Forbidden("invalid_invite", "the invite code is unknown, spent or expired")
    user = await create_user(db, passwords, username, password)
    if invite is not None:
        spent = await db.execute(
            update(InviteCode)
            .where(InviteCode.id == invite.id, InviteCode.used_at.is_(None))
            .values(used_at=utcnow(), used_by=user.id)
        )
        if spent.rowcount != 1:  # type: ignore[attr-defined]
            raise Forbidden("invalid_invite", "the invite code is unknown, spent or expired")
    return user


def account_disabled() -> Forbidden:
    return Forbidden("account_disabled", "this account is disabled; ask an operator to enable it")


async def authenticate(db: AsyncSession, passwords: Passwords, username: str, password: str) -> User:
    user = await db.scalar(select(User).where(func.lower(User.username) == username_key(username)))
    if not await passwords.verify(user.password_hash if user else None, password) or user is None:
        raise Unauthenticated("invalid_credentials", "wrong username or password")
    # Only after the password: whether an account is disabled is no one else's business.
    if user.disabled_at is not None:
        raise account_disabled()
    if passwords.needs_rehash(user.password_hash):
        user.password_hash = await passwords.hash(password)
    return user


@dataclass(frozen=True)
class NewSession:
    cookie_value: str
    csrf_token: str
    expires_at: datetime


async def open_session(db: AsyncSession, user: User, days: int, user_agent: str | None = None) -> NewSession:
    cookie_value = secrets.token_urlsafe(32)
    csrf_token = secrets.token_urlsafe(24)
    now = utcnow()
    expires_at = now + timedelta(days=days)
    db.add(
        Session(
            user_id=user.id,
            token_hash=token_digest(cookie_value),
            csrf_token=csrf_token,
            expires_at=expires_at,
            last_seen_at=now,
            user_agent=user_agent[:USER_AGENT_CHARS] if user_agent else None,
        )
    )
    await db.flush()
    return NewSession(cookie_value, csrf_token, expires_at)


async def session_user(db: AsyncSession, cookie_value: str) -> tuple[User, Session] | None:
    """The enabled account and live session of a cookie; None for anything else."""
    now = utcnow()
    row = await _credential_owner(db, Session, cookie_value, Session.expires_at > now)
    if row is None:
        return None
    user, session = row
    if _due(session.last_seen_at, now):
        await db.execute(update(Session).where(Session.id == session.id).values(last_seen_at=now))
    return user, session


_Credential = TypeVar("_Credential", Session, ApiToken)


async def _credential_owner(
    db: AsyncSession, credential: type[_Credential], secret: str, live: ColumnElement[bool]
) -> tuple[User, _Credential] | None:
    """The enabled account behind a credential row whose hash is the secret's and which is `live`."""
    row = (
        await db.execute(
            select(User, credential)
            .join(credential, credential.user_id == User.id)
            .where(credential.token_hash == token_digest(secret), live, User.disabled_at.is_(None))
        )
    ).first()
    return None if row is None else (row[0], row[1])


def _due(last_seen: datetime | None, now: datetime) -> bool:
    """Coarse last-use tracking: at most one write per credential per minute."""
    return last_seen is None or now - last_seen > timedelta(minutes=1)


async def list_sessions(db: AsyncSession, user: User) -> list[Session]:
    """The account's live browser sessions, the most recently seen first."""
    rows = await db.scalars(
        select(Session)
        .where(Session.user_id == user.id, Session.expires_at > utcnow())
        .order_by(func.coalesce(Session.last_seen_at, Session.created_at).desc(), Session.id.desc())
    )
    return list(rows)


async def close_own_session(db: AsyncSession, user: User, session_id: int) -> None:
    """Ends one of the account's sessions; another account's is "not found"."""
    ended = await db.execute(delete(Session).where(Session.id == session_id, Session.user_id == user.id))
    if not ended.rowcount:  # type: ignore[attr-defined]
        raise NotFound.of("session")


async def close_session(db: AsyncSession, session: Session) -> None:
    await db.delete(session)


async def close_sessions(db: AsyncSession, user: User, keep: Session | None = None) -> int:
    """Ends every browser session of `user` except `keep`; returns how many ended."""
    stmt = delete(Session).where(Session.user_id == user.id)
    if keep is not None:
        stmt = stmt.where(Session.id != keep.id)
    result = await db.execute(stmt)
    return result.rowcount or 0  # type: ignore[attr-defined]


async def change_password(
    db: AsyncSession, passwords: Passwords, user: User, current: str, new: str, keep: Session | None
) -> None:
    """Checks the current password, stores the new one and ends the user's other sessions."""
    row = await db.get(User, user.id)  # `user` may come from another session (authentication)
    if row is None or not await passwords.verify(row.password_hash, current):
        raise Unauthenticated("invalid_credentials", "the current password is wrong")
    check_new_credentials(row.username, new)
    row.password_hash = await passwords.hash(new)
    await close_sessions(db, row, keep)


async def set_language(db: AsyncSession, user: User, language: str | None) -> User:
    """Stores the page's language for the account; None goes back to following the browser."""
    if language is not None and not i18n.is_known(language):
        raise Invalid("unknown_language", f"no catalog for the language {language!r}")
    row = await db.get_one(User, user.id)  # `user` may come from another session (authentication)
    row.language = language
    await db.flush()
    return row


@dataclass(frozen=True)
class NewToken:
    token: ApiToken
    secret: str


async def create_token(db: AsyncSession, user: User, name: str, expires_in_days: int) -> NewToken:
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires_at = utcnow() + timedelta(days=expires_in_days)
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
        raise NotFound.of("token")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    return token


async def token_user(db: AsyncSession, secret: str) -> tuple[User, ApiToken] | None:
    """The enabled account and live token of a bearer secret; None for anything else."""
    now = utcnow()
    row = await _credential_owner(db, ApiToken, secret, ApiToken.revoked_at.is_(None))
    if row is None:
        return None
    user, token = row
    if token.expires_at is not None and token.expires_at <= now:
        return None
    if _due(token.last_used_at, now):
        await db.execute(update(ApiToken).where(ApiToken.id == token.id).values(last_used_at=now))
    return user, token


async def revoke_all_tokens(db: AsyncSession, user: User) -> int:
    """Revokes every live token of `user`; returns how many."""
    result = await db.execute(
        update(ApiToken)
        .where(ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    return result.rowcount or 0  # type: ignore[attr-defined]


async def is_enabled(db: AsyncSession, user_id: int) -> bool:
    """The account exists and is not disabled."""
    return await db.scalar(select(User.id).where(User.id == user_id, User.disabled_at.is_(None))) is not None


async def still_signed_in(
    sessions: async_sessionmaker[AsyncSession], session_id: int | None, token_id: int | None
) -> bool:
    """Whether the credential a long request began with still holds: its account enabled, the
    session not ended (logged out, password changed) or the token not revoked or expired."""
    now = utcnow()
    if session_id is not None:
        query = (
            select(Session.id)
            .join(User, User.id == Session.user_id)
            .where(Session.id == session_id, Session.expires_at > now)
        )
    else:
        query = (
            select(ApiToken.id)
            .join(User, User.id == ApiToken.user_id)
            .where(
                ApiToken.id == token_id,
                ApiToken.revoked_at.is_(None),
                or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
            )
        )
    async with sessions() as db:
        return await db.scalar(query.where(User.disabled_at.is_(None))) is not None
