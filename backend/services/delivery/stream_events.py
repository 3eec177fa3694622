"""What each SSE event of a turn carries (SPEC 6.1): one model per event, built from the
runtime's contract events.

An event's name is the `type` literal of the contract event it comes from, so the log, the
streams, the replay and orphan recovery never spell a name themselves. `data()` is the JSON
the log stores and the stream sends as `data:`. The events that change what the user saw
(text, tools) are the contract events themselves: `visible` reads a stored row back into one,
so stored rows fold with `chat_shell.events.fold` unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from backend.schemas.conversations import StoredMessage
from chat_shell.contracts import (
    ApprovalDecided,
    ApprovalRequested,
    CompactionRecord,
    ContextCompactionEvent,
    ContextMetrics,
    ContextMetricsEvent,
    MessageDelta,
    ToolCompleted,
    ToolStarted,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
)
from chat_shell.events.fold import VisibleEvent


def name_of(contract: type[BaseModel]) -> str:
    """The event name of a contract event: its `type` literal."""
    name = contract.model_fields["type"].default
    assert isinstance(name, str), contract
    return name


class StreamPayload(BaseModel):
    """The `data:` of one SSE event; `event` is its `event:` name."""

    event: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A payload that is a contract event itself is named by that event."""
        super().__init_subclass__(**kwargs)
        contract = next((base for base in cls.__bases__ if "type" in getattr(base, "model_fields", {})), None)
        if contract is not None:
            cls.event = name_of(contract)

    def data(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"type"})


class Started(StreamPayload):
    """The turn's ids, and the model and profile it runs with (a replayed turn whose log was
    pruned knows only its ids, and says it was `synthesized`)."""

    event = name_of(TurnStarted)
    turn_id: int
    message_id: int
    conversation_id: int | None = None
    user_message_id: int | None = None
    model: str | None = None
    profile: str | None = None
    synthesized: bool | None = None

    def data(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class Delta(MessageDelta, StreamPayload): ...


class ToolStart(ToolStarted, StreamPayload): ...


class ToolEnd(ToolCompleted, StreamPayload): ...


class ApprovalAsk(ApprovalRequested, StreamPayload): ...


class ApprovalAnswer(ApprovalDecided, StreamPayload): ...


class Metrics(ContextMetrics, StreamPayload):
    """The snapshot itself."""

    event = name_of(ContextMetricsEvent)


class Compaction(CompactionRecord, StreamPayload):
    """The compaction record (its checkpoint chain stays in the backend)."""

    event = name_of(ContextCompactionEvent)

    def data(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class Completed(StreamPayload):
    """The assistant message exactly as the same transaction stores it."""

    event = name_of(TurnCompleted)
    message: StoredMessage


class Failed(StreamPayload):
    event = name_of(TurnFailed)
    code: str
    message: str
    partial: str = ""


class Cancelled(StreamPayload):
    event = name_of(TurnCancelled)
    partial: str = ""


# What a turn's log says when the turn runs again from its start (its worker died, or a
# draining worker handed it back): the page drops the partial reply and shows why.
RESTARTED = "turn.restarted"
RESTARTED_NOTE = "The reply restarted after a server fault."


class Restarted(StreamPayload):
    """The backend's own event (the runtime never restarts a turn): the text and tools before
    it are replaced by what follows."""

    event: ClassVar[str] = RESTARTED
    code: str = "worker_lost"
    message: str = RESTARTED_NOTE


_VISIBLE: dict[str, type[Delta | ToolStart | ToolEnd | ApprovalAsk | ApprovalAnswer]] = {
    model.event: model for model in (Delta, ToolStart, ToolEnd, ApprovalAsk, ApprovalAnswer)
}


def visible(event: str, data: dict[str, Any]) -> VisibleEvent:
    """A stored text or tool event, as the contract event it was made from (to fold it)."""
    return _VISIBLE[event].model_validate(data)


def relayed(
    event: MessageDelta
    | ToolStarted
    | ToolCompleted
    | ApprovalRequested
    | ApprovalDecided
    | ContextMetricsEvent
    | ContextCompactionEvent,
) -> StreamPayload:
    """The payload of a runtime event that needs nothing from the backend."""
    match event:
        case ContextMetricsEvent():
            return Metrics.model_validate(event.snapshot, from_attributes=True)
        case ContextCompactionEvent():
            return Compaction.model_validate(event.record, from_attributes=True)
        case _:
            return _VISIBLE[event.type].model_validate(event, from_attributes=True)
