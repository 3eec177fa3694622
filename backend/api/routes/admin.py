"""The operators' users page API: accounts, their role and state, password resets, the audit log.

Operator accounts only (others: 403 `operator_only`); every action is recorded in the audit log
(`backend.services.accounts.admin`). Invite codes are under `/api/auth/invites`.
"""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, status

from backend.api.deps import Ctx, CurrentOperator, Db
from backend.api.params import UserId
from backend.context import AppContext
from backend.schemas.admin import AdminUserListItem, AdminUserOut, AuditEventOut, PasswordReset, UserCreate
from backend.services.accounts import admin

router = APIRouter(prefix="/api/admin", tags=["operators"])


@router.get("/users", response_model=list[AdminUserListItem])
async def list_users(_: CurrentOperator, db: Db) -> list[AdminUserListItem]:
    return await admin.list_users(db)


@router.post("/users", status_code=status.HTTP_201_CREATED, response_model=AdminUserOut)
async def create_user(body: UserCreate, operator: CurrentOperator, db: Db, ctx: Ctx) -> AdminUserOut:
    user = await admin.create_user(
        db, ctx.passwords, operator, body.username, body.password, operator=body.is_operator
    )
    return AdminUserOut.model_validate(user)


async def _stop_activity(ctx: AppContext, disabled: admin.Disabled) -> None:
    ctx.open_streams.end_user(disabled.user.id)
    for turn_id in disabled.running_turns:
        await ctx.runner.request_stop(turn_id)


@router.post("/users/{user_id}/disable", response_model=AdminUserOut)
async def disable_user(
    user_id: UserId, operator: CurrentOperator, db: Db, ctx: Ctx, after: BackgroundTasks
) -> AdminUserOut:
    """Its sessions end and its tokens are revoked at once; its open streams close and its
    running turns stop. You cannot disable yourself (409 `cannot_disable_self`) nor the last
    operator (409 `last_operator`)."""
    disabled = await admin.disable(db, operator, user_id)
    # After the commit, so a stream that reconnects at once is refused.
    after.add_task(_stop_activity, ctx, disabled)
    return AdminUserOut.model_validate(disabled.user)


@router.post("/users/{user_id}/enable", response_model=AdminUserOut)
async def enable_user(user_id: UserId, operator: CurrentOperator, db: Db) -> AdminUserOut:
    """It may log in again (its old tokens stay revoked)."""
    return AdminUserOut.model_validate(await admin.enable(db, operator, user_id))


@router.post("/users/{user_id}/password", status_code=status.HTTP_204_NO_CONTENT)
async def reset_password(
    user_id: UserId, body: PasswordReset, operator: CurrentOperator, db: Db, ctx: Ctx
) -> None:
    """Sets the password the operator chose; every session of the account ends."""
    await admin.reset_password(db, ctx.passwords, operator, user_id, body.password)


@router.put("/users/{user_id}/operator", response_model=AdminUserOut)
async def grant_operator(user_id: UserId, operator: CurrentOperator, db: Db) -> AdminUserOut:
    return AdminUserOut.model_validate(await admin.set_operator(db, operator, user_id, operator=True))


@router.delete("/users/{user_id}/operator", response_model=AdminUserOut)
async def revoke_operator(user_id: UserId, operator: CurrentOperator, db: Db) -> AdminUserOut:
    """The last enabled operator cannot give up the role (409 `last_operator`)."""
    return AdminUserOut.model_validate(await admin.set_operator(db, operator, user_id, operator=False))


@router.get("/audit", response_model=list[AuditEventOut])
async def audit_log(_: CurrentOperator, db: Db) -> list[AuditEventOut]:
    """The newest 200 operator actions, newest first."""
    return [AuditEventOut.model_validate(event) for event in await admin.audit_log(db)]
