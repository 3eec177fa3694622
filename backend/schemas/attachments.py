"""Bodies of the attachment endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import AliasPath, BaseModel, ConfigDict, Field, computed_field, field_validator


def _noted(key: str) -> Any:
    """A figure extraction wrote into the row's `parse_notes`."""
    return AliasPath("parse_notes", key)


class AttachmentOut(BaseModel):
    """An upload as its owner sees it; the figures extraction found are in `parse_notes`."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    filename: str
    mime_type: str
    kind: str | None = Field(default=None, validation_alias=_noted("kind"))
    size_bytes: int
    sha256: str | None
    status: str
    conversation_id: int | None
    # Sent with a message (it then belongs to that message's conversation).
    sent: bool = Field(default=False, validation_alias="message_pk")
    extracted_chars: int
    truncated_at_parse: bool = Field(default=False, validation_alias=_noted("truncated_at_parse"))
    note: str | None = Field(default=None, validation_alias=_noted("note"))
    parse_notes: dict[str, Any]
    created_at: datetime

    @field_validator("parse_notes", mode="before")
    @classmethod
    def _notes(cls, notes: dict[str, Any] | None) -> dict[str, Any]:
        return notes or {}

    @field_validator("sent", mode="before")
    @classmethod
    def _sent(cls, message_pk: int | None) -> bool:
        return message_pk is not None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def download_url(self) -> str:
        return f"/api/attachments/{self.id}/download"
