"""Request and response bodies of the operators' users page API (`/api/admin`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class AdminUserOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    username: str
    is_operator: bool
    created_at: datetime
    disabled_at: datetime | None


class AdminUserListItem(AdminUserOut):
    last_seen_at: datetime | None = Field(description="when any live session was last seen")


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
