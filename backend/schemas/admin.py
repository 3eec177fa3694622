"""Request and response bodies of the operators' users page API (`/api/admin`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from backend.services.records.admin import InviteRow, UserRow


class AdminUserOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    username: str
    is_operator: bool
    created_at: datetime
    disabled_at: datetime | None


class AdminUserListItem(AdminUserOut):
    last_seen_at: datetime | None = Field(description="when any live session was last seen")

    @classmethod
    def of(cls, row: UserRow) -> AdminUserListItem:
        return cls(**AdminUserOut.model_validate(row.user).model_dump(), last_seen_at=row.last_seen_at)


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=256)
    is_operator: bool = False


class PasswordReset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    password: str = Field(min_length=1, max_length=256, description="the account's new password")


class AuditEventOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    created_at: datetime
    actor_name: str | None = Field(description="the operator; null: the chat-shell command line")
    action: str
    target_name: str | None
    detail: str | None


class InviteListItem(BaseModel):
    id: int
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None
    used_by: str | None = Field(description="the account it created")

    @classmethod
    def of(cls, row: InviteRow) -> InviteListItem:
        invite = row.invite
        return cls(
            id=invite.id,
            created_at=invite.created_at,
            expires_at=invite.expires_at,
            used_at=invite.used_at,
            used_by=row.used_by_name,
        )
