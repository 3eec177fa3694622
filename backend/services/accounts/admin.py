"""Operators' account management (issue 21): users, their operator role, disabling, password
resets, invite codes, and the audit log every one of these actions writes.

Each action takes the operator who does it (`actor`; None is the `chat-shell` command line) and
records who, what, on whom and when in `audit_events`, in the action's own transaction: an
action is stored with its record or not at all. Disabling an account ends its sessions and
revokes its tokens; authentication refuses a disabled account besides (`auth`), so nothing of it
works from the moment the transaction commits (its open streams and running turns are stopped
by the caller then). There is always an enabled operator left: the
last one can neither revoke their own role nor disable themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from backend.models import AuditEvent, InviteCode, Session, User
from backend.models.base import utcnow
from backend.schemas.admin import AdminUserListItem, AdminUserOut, InviteListItem
from backend.services.accounts import auth
from backend.services.conversations import conversations
from backend.services.errors import Conflict, NotFound

AuditAction = Literal[
    "user.create",
    "user.disable",
    "user.enable",
    "user.password_reset",
    "user.operator_grant",
    "user.operator_revoke",
    "invite.create",
    "invite.revoke",
]
AUDIT_PAGE = 200


async def record(
    db: AsyncSession,
    actor: User | None,
    action: AuditAction,
    target: User | None = None,
    detail: str | None = None,
) -> None:
    db.add(
        AuditEvent(
            actor_id=actor.id if actor else None,
            actor_name=actor.username if actor else None,
            action=action,
            target_id=target.id if target else None,
            target_name=target.username if target else None,
            detail=detail,
        )
    )
    await db.flush()


async def audit_log(db: AsyncSession, limit: int = AUDIT_PAGE) -> list[AuditEvent]:
    """The newest records first."""
    return list(await db.scalars(select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)))


async def list_users(db: AsyncSession) -> list[AdminUserListItem]:
    """Every account by name, with when any of its live sessions was last seen."""
    seen = (
        select(Session.user_id, func.max(Session.last_seen_at).label("last_seen_at"))
        .where(Session.expires_at > utcnow())
        .group_by(Session.user_id)
        .subquery()
    )
    rows = await db.execute(
        select(User, seen.c.last_seen_at)
        .outerjoin(seen, seen.c.user_id == User.id)
        .order_by(func.lower(User.username))
    )
    return [
        AdminUserListItem(**AdminUserOut.model_validate(user).model_dump(), last_seen_at=last_seen)
        for user, last_seen in rows
    ]


async def _user(db: AsyncSession, user_id: int) -> User:
    # Locked: two operators acting on one account at once apply one after the other (after
    # `_lock_operators` when both are taken, always in that order).
    user = await db.scalar(select(User).where(User.id == user_id).with_for_update())
    if user is None:
        raise NotFound.of("user")
    return user


async def create_user(
    db: AsyncSession,
    passwords: auth.Passwords,
    actor: User | None,
    username: str,
    password: str,
    *,
    operator: bool = False,
) -> User:
    user = await auth.create_user(db, passwords, username, password, operator=operator)
    await record(db, actor, "user.create", user, "operator" if operator else None)
    return user


async def _lock_operators(db: AsyncSession) -> list[int]:
    """The enabled operators, held until the transaction ends, before anything else is read:
    two operators demoting or disabling each other at once apply one after the other, and the
    second sees the first's outcome. An UPDATE that changes nothing does it on both databases:
    row locks on PostgreSQL, the write lock (the process's write gate) on SQLite."""
    enabled = (User.is_operator.is_(True), User.disabled_at.is_(None))
    await db.execute(
        update(User).where(*enabled).values(is_operator=True).execution_options(synchronize_session=False)
    )
    return list(await db.scalars(select(User.id).where(*enabled)))


def _refuse_last_operator(operators: list[int], target: User, what: str) -> None:
    """Refused when `target` is the only enabled operator."""
    if operators == [target.id]:
        raise Conflict(
            "last_operator",
            f"{target.username} is the last operator and cannot {what}; make another operator first",
        )


@dataclass(frozen=True)
class Disabled:
    user: User
    # For the caller to stop once the disabling is committed (the runner owns running turns).
    running_turns: list[int]


async def disable(db: AsyncSession, actor: User, user_id: int) -> Disabled:
    """Ends every session and revokes every token of the account at once; its running turns
    are named for the caller to stop. Nobody disables themselves or the last operator."""
    if user_id == actor.id:
        raise Conflict("cannot_disable_self", "you cannot disable your own account")
    operators = await _lock_operators(db)
    user = await _user(db, user_id)
    running = await conversations.running_turns_of(db, user.id)
    if user.disabled_at is not None:
        return Disabled(user, running)
    _refuse_last_operator(operators, user, "be disabled")
    user.disabled_at = utcnow()
    ended = await auth.close_sessions(db, user)
    revoked = await auth.revoke_all_tokens(db, user)
    detail = f"sessions ended: {ended}, tokens revoked: {revoked}, running turns stopped: {len(running)}"
    await record(db, actor, "user.disable", user, detail)
    return Disabled(user, running)


async def enable(db: AsyncSession, actor: User, user_id: int) -> User:
    """The account may log in again; its old tokens stay revoked."""
    user = await _user(db, user_id)
    if user.disabled_at is not None:
        user.disabled_at = None
        await record(db, actor, "user.enable", user)
    return user


async def reset_password(
    db: AsyncSession, passwords: auth.Passwords, actor: User, user_id: int, password: str
) -> None:
    """A new password chosen by the operator; every session of the account ends (its tokens
    stay)."""
    user = await _user(db, user_id)
    auth.check_new_credentials(user.username, password)
    user.password_hash = await passwords.hash(password)
    ended = await auth.close_sessions(db, user)
    await record(db, actor, "user.password_reset", user, f"sessions ended: {ended}")


async def set_operator(db: AsyncSession, actor: User, user_id: int, operator: bool) -> User:
    operators = await _lock_operators(db) if not operator else []
    user = await _user(db, user_id)
    if operator == user.is_operator:
        return user
    if not operator:
        _refuse_last_operator(operators, user, "give up the operator role")
    user.is_operator = operator
    await record(db, actor, "user.operator_grant" if operator else "user.operator_revoke", user)
    return user


async def list_invites(db: AsyncSession) -> list[InviteListItem]:
    """Every invite code (only digests are stored: the codes themselves were shown once)."""
    used_by = aliased(User)
    rows = await db.execute(
        select(InviteCode, used_by.username)
        .outerjoin(used_by, used_by.id == InviteCode.used_by)
        .order_by(InviteCode.id.desc())
    )
    return [
        InviteListItem(
            id=invite.id,
            created_at=invite.created_at,
            expires_at=invite.expires_at,
            used_at=invite.used_at,
            used_by=name,
        )
        for invite, name in rows
    ]


async def create_invite(db: AsyncSession, actor: User | None, days: int) -> auth.NewInvite:
    invite = await auth.create_invite(db, days)
    await record(db, actor, "invite.create", detail=f"valid {days} days")
    return invite


async def revoke_invite(db: AsyncSession, actor: User, invite_id: int) -> None:
    """An unspent code stops working (it is deleted); a spent one is kept as the record of
    whom it let in."""
    invite = await db.scalar(select(InviteCode).where(InviteCode.id == invite_id).with_for_update())
    if invite is None:
        raise NotFound.of("invite code")
    if invite.used_at is not None:
        raise Conflict("invite_spent", "this invite code was already used; there is nothing to revoke")
    await db.delete(invite)
    await record(db, actor, "invite.revoke", detail=f"invite #{invite_id}")
