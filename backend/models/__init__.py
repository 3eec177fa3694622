"""ORM models. Importing this package registers every table on `Base.metadata`."""

from backend.models.attachments import Attachment, AttachmentStatus
from backend.models.base import Base
from backend.models.conversations import (
    FINISHED_STATUSES,
    Conversation,
    Message,
    MessageStatus,
    Role,
)
from backend.models.rollups import CompactionHour, ConversationPressure, TurnHour
from backend.models.turns import CompactionEvent, Turn, TurnEvent, TurnStatus
from backend.models.users import ApiToken, Session, User

__all__ = [
    "FINISHED_STATUSES",
    "ApiToken",
    "Attachment",
    "AttachmentStatus",
    "Base",
    "CompactionEvent",
    "CompactionHour",
    "Conversation",
    "ConversationPressure",
    "Message",
    "MessageStatus",
    "Role",
    "Session",
    "Turn",
    "TurnEvent",
    "TurnHour",
    "TurnStatus",
    "User",
]
