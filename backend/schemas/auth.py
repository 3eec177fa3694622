"""Request and response bodies of the account endpoints."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from backend.models import Session


class Credentials(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=256)


class Registration(Credentials):
    invite_code: str | None = Field(default=None, max_length=100)


class InviteOut(BaseModel):
    code: str = Field(description="Give it to the person who may register; shown once.")
    expires_at: datetime


class InviteCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    days: int | None = Field(default=None, ge=1, le=365)


class UserOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    username: str
    is_operator: bool
    created_at: datetime
    language: str | None = Field(description="The page's language as chosen; null follows the browser.")


class LanguageChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    language: str | None = Field(
        description='A language tag of the page ("en", "zh-CN"); null follows the browser.'
    )


class LoginOut(BaseModel):
    user: UserOut
    csrf_token: str


class PasswordChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    current_password: str = Field(min_length=1, max_length=256)
    new_password: str = Field(min_length=1, max_length=256)


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    expires_in_days: int | None = Field(
        default=None, ge=1, le=3650, description="default: the server's CHAT_SHELL_TOKEN_DAYS (90)"
    )


class TokenOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="The secret; shown once.")


class SessionOut(BaseModel):
    """A live browser session of the account (the cookie itself is never shown)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    created_at: datetime
    last_seen_at: datetime | None
    expires_at: datetime
    user_agent: str | None
    current: bool = Field(False, description="the session this request came from")

    @classmethod
    def of(cls, session: Session, current_id: int | None) -> SessionOut:
        out = cls.model_validate(session)
        out.current = out.id == current_id
        return out


class SessionsEnded(BaseModel):
    ended: int
