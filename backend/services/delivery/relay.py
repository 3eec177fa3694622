"""The relay of one turn: runtime events in; logged stream events and the persistence they
imply out.

Each runtime event becomes its stream payload (`stream_events`) on the turn's log, and the
relay folds the same events into what the user saw (`chat_shell.events.fold`), so a turn
that fails outside the runtime stores exactly the text and blocks the stream showed. A
compaction's checkpoint is written the moment it is reported; the outcome with the terminal
event, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import TurnStatus
from backend.models.base import utcnow
from backend.schemas.conversations import StoredMessage, user_visible
from backend.services.dashboard import rollups
from backend.services.delivery import turn_endings, turns
from backend.services.delivery.event_log import StoredEvent, TurnLog
from backend.services.delivery.stream_events import (
    Cancelled,
    Completed,
    Failed,
    Started,
    StreamPayload,
    relayed,
)
from chat_shell import contracts
from chat_shell.events.fold import VisibleTurn


class Relay:
    def __init__(self, started: turns.StartedTurn, turn_log: TurnLog, model: str) -> None:
        self.started = started
        self.turn_log = turn_log
        self.model = model
        self.seen = VisibleTurn()
        self.finished = False
        # The MCP server of each started call (the rollup of MCP calls counts per server).
        self._servers: dict[str, str] = {}

    def forward(self, event: contracts.TurnEvent) -> None:
        if self.finished:
            return
        self.seen.add(event)
        match event:
            case contracts.TurnStarted():
                started = self.started
                self.turn_log.append(
                    Started(
                        turn_id=started.turn_id,
                        conversation_id=started.conversation_id,
                        user_message_id=started.user_message.message_id,
                        message_id=started.assistant_message.message_id,
                        model=event.model,
                        profile=event.profile,
                    )
                )
            case contracts.MessageDelta():
                self.turn_log.append_text(event.text)
            case contracts.ToolStarted():
                if event.server is not None:
                    self._servers[event.call_id] = event.server
                self.turn_log.append(relayed(event))
            case contracts.ToolCompleted():
                self._tool_completed(event)
            case (
                contracts.ApprovalRequested() | contracts.ApprovalDecided() | contracts.ContextMetricsEvent()
            ):
                self.turn_log.append(relayed(event))
            case contracts.ContextCompactionEvent():
                self._compaction(event)
            case contracts.TurnCompleted():
                self._finish(TurnStatus.COMPLETED, event.result, None, None)
            case contracts.TurnFailed():
                error = {"code": event.code, "message": event.message}
                ending = Failed(code=event.code, message=event.message, partial=event.partial)
                self._finish(TurnStatus.FAILED, event.result, error, ending)
            case contracts.TurnCancelled():
                self._finish(TurnStatus.CANCELLED, event.result, None, Cancelled(partial=event.partial))

    def fail(self, code: str, message: str, reason: contracts.TerminationReason = "internal_error") -> None:
        """The turn failed outside the runtime (by default a fault of the host, not of the
        model): it ends with what the stream showed so far."""
        self.seen.end()
        seen = self.seen
        result = contracts.TurnResult(value=seen.text, blocks=seen.blocks, termination_reason=reason)
        ending = Failed(code=code, message=message, partial=self.seen.text)
        self._finish(TurnStatus.FAILED, result, {"code": code, "message": message}, ending)

    def _tool_completed(self, event: contracts.ToolCompleted) -> None:
        server, outcome = self._servers.pop(event.call_id, None), event.mcp_outcome
        if server is None or outcome is None:
            self.turn_log.append(relayed(event))
            return

        async def count(db: AsyncSession, _: Sequence[StoredEvent]) -> None:
            rollups.stage_mcp_call(db, server, event.name, outcome, event.duration_ms)

        self.turn_log.append(relayed(event), count)

    def _compaction(self, event: contracts.ContextCompactionEvent) -> None:
        started, record, chain = self.started, event.record, event.checkpoint_chain
        model = self.model

        async def persist(db: AsyncSession, _: Sequence[StoredEvent]) -> None:
            if record.status == "completed" and chain:
                await turn_endings.store_checkpoint(db, started.assistant_message.id, chain)
            await turn_endings.record_compaction(db, started, record, model)

        self.turn_log.append(relayed(event), persist)

    def _finish(
        self,
        status: TurnStatus,
        result: contracts.TurnResult,
        error: dict[str, str] | None,
        ending: StreamPayload | None,
    ) -> None:
        self.finished = True
        started = self.started
        now = utcnow()
        if ending is None:
            # `turn.completed` carries the message exactly as the same transaction stores it.
            message = StoredMessage.model_validate(started.assistant_message).model_copy(
                update={
                    "status": status.value,
                    "result": user_visible(turn_endings.result_document(result, error, self.model)),
                    "updated_at": now,
                }
            )
            ending = Completed(message=message)

        # Compaction rows were written as their events arrived; the result only repeats them.
        async def persist(db: AsyncSession, events: Sequence[StoredEvent]) -> None:
            await turn_endings.finish_turn(db, started, status, result, error, now, events[-1].seq)

        self.turn_log.append(ending, persist)
