"""Share links (issue 22): what the owner manages, and what anyone with the link reads."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, computed_field

from backend.schemas.conversations import AttachmentSummary


class NewShare(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Whether the shared page lists the messages' files (names, types, sizes; never contents).
    include_attachments: bool = False


class ShareOut(BaseModel):
    """A link as its owner sees it."""

    model_config = ConfigDict(from_attributes=True)

    token: str
    include_attachments: bool
    created_at: datetime

    @computed_field  # type: ignore[prop-decorator]
    @property
    def path(self) -> str:
        return f"/s/{self.token}"


class ShareList(BaseModel):
    items: list[ShareOut]


class SharedMessage(BaseModel):
    """One message as a shared page shows it: the text the owner saw, never the model's view
    (no chain, no summaries, no metrics)."""

    role: str
    status: str
    text: str
    created_at: datetime
    model: str | None = None
    # Names of the tools the reply used, in order.
    tools: list[str] = []
    attachments: list[AttachmentSummary] = []


class SharedConversation(BaseModel):
    title: str
    shared_at: datetime
    messages: list[SharedMessage]
