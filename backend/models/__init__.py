"""ORM models. Importing this package registers every table on `Base.metadata`."""

from backend.models.attachments import Attachment, AttachmentStatus
from backend.models.base import Base
from backend.models.conversations import (
    FINISHED_STATUSES,
    Conversation,
    Message,
    MessageStatus,
    Preset,
    Role,
    TitleSource,
)
from backend.models.rollups import CompactionHour, ConversationPressure, McpToolHour, TurnHour
from backend.models.shares import ShareLink
from backend.models.turns import CompactionEvent, Turn, TurnEvent, TurnStatus
from backend.models.users import ApiToken, AuditEvent, InviteCode, Session, User

__all__ = [
    "FINISHED_STATUSES",
    "ApiToken",
    "Attachment",
    "AttachmentStatus",
    "AuditEvent",
    "Base",
    "CompactionEvent",
    "CompactionHour",
    "Conversation",
    "ConversationPressure",
    "InviteCode",
    "McpToolHour",
    "Message",
    "MessageStatus",
    "Preset",
    "Role",
    "Session",
    "ShareLink",
    "TitleSource",
    "Turn",
    "TurnEvent",
    "TurnHour",
    "TurnStatus",
    "User",
]
