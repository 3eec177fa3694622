"""Background turn jobs: run chat_shell, log every event durably, write the outcome.

A turn runs as a task of this process, independent of any HTTP connection: closing the page
never stops it; only an explicit stop does. Each event the runtime yields is appended to the
turn's log (`event_log`) and relayed to listeners (`broker`). The backend owns the assistant
message: a compaction checkpoint is written the moment chat_shell reports it, and the final
result together with the terminal event.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Attachment, Conversation, Turn, TurnStatus
from backend.models.base import utcnow
from backend.services import attachments, streams, turns
from backend.services.broker import LocalBroker
from backend.services.capabilities import CapabilityIssuer
from backend.services.conversations import user_visible_result
from backend.services.event_log import EventWriter, StoredEvent, TurnLog
from backend.services.history import resolve_history
from chat_shell.contracts import (
    AttachmentRef,
    ContextCompactionEvent,
    ContextMetricsEvent,
    MessageDelta,
    ToolCompleted,
    ToolStarted,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    TurnResult,
    TurnRuntime,
    TurnStarted,
    UserInput,
)

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5.0
PRUNE_EVERY_SECONDS = 3600.0
# A runner silent for this long is presumed dead (several replicas share the database).
STALE_AFTER = timedelta(seconds=30)


@dataclass
class _Job:
    started: turns.StartedTurn
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class TurnDefaults:
    model: str
    system_prompt: str | None


class TurnRunner:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        runtime: TurnRuntime,
        writer: EventWriter,
        broker: LocalBroker,
        defaults: TurnDefaults,
        *,
        shared: bool,
        event_retention: timedelta | None = None,
        remote_access: CapabilityIssuer | None = None,
    ) -> None:
        self.runner_id = uuid.uuid4().hex
        self._sessions = sessions
        self._runtime = runtime
        self._writer = writer
        self._broker = broker
        self._defaults = defaults
        # Service mode: chat_shell loads the history itself, with access minted per turn.
        self._remote_access = remote_access
        # With several replicas (shared broker) only stale turns are orphans; alone, all are.
        self._shared = shared
        # Event rows of turns finished longer ago are pruned; their replay is synthesized.
        self._event_retention = event_retention
        self._next_prune = 0.0
        self._jobs: dict[int, _Job] = {}
        self._maintenance: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._broker.start(self._cancel_local)
        await self.recover_orphans(stale_only=self._shared)
        self._maintenance = asyncio.create_task(self._heartbeat_loop(), name="turn-heartbeat")

    async def stop(self) -> None:
        """On shutdown running turns are stopped and finalized as cancelled, nothing is left running."""
        if self._maintenance is not None:
            self._maintenance.cancel()
            await asyncio.gather(self._maintenance, return_exceptions=True)
        for job in list(self._jobs.values()):
            job.cancel.set()
        await asyncio.gather(*(job.done.wait() for job in list(self._jobs.values())))

    @property
    def active(self) -> int:
        return len(self._jobs)

    def model_for(self, conversation: Conversation) -> str:
        return conversation.model_profile or self._defaults.model

    @property
    def system_prompt(self) -> str | None:
        return self._defaults.system_prompt

    def launch(self, started: turns.StartedTurn, model: str) -> None:
        job = _Job(started)
        self._jobs[started.turn_id] = job
        job.task = asyncio.create_task(self._run(job, model), name=f"turn-{started.turn_id}")

    async def wait(self, turn_id: int) -> None:
        job = self._jobs.get(turn_id)
        if job is not None:
            await job.done.wait()

    async def request_stop(self, turn_id: int) -> None:
        await self._broker.request_cancel(turn_id)

    async def _cancel_local(self, turn_id: int) -> None:
        job = self._jobs.get(turn_id)
        if job is not None:
            job.cancel.set()

    # -- the job -------------------------------------------------------------------------

    async def _run(self, job: _Job, model: str) -> None:
        started = job.started
        turn_log = self._writer.open(started.turn_id)
        relay = _Relay(started, turn_log, model)
        try:
            request = await self._build_request(started, model)
            async for event in self._runtime.run(request, job.cancel):
                relay.forward(event)
            if not relay.finished:
                relay.fail("runtime_error", "the runtime ended without a result")
        except Exception as exc:
            log.exception("turn %s failed outside the runtime", started.turn_id)
            if not relay.finished:
                relay.fail("internal_error", f"the turn could not run: {type(exc).__name__}")
        finally:
            try:
                await turn_log.drain()
            except Exception:
                log.exception("turn %s: its final events could not be stored", started.turn_id)
            self._jobs.pop(started.turn_id, None)
            job.done.set()

    async def _build_request(self, started: turns.StartedTurn, model: str) -> TurnRequest:
        """Package mode resolves the history here; service mode sends `backend` access instead
        and chat_shell loads the same pipeline's output over HTTP."""
        history = None
        async with self._sessions() as db:
            if self._remote_access is None:
                conversation = await db.get(Conversation, started.conversation_id)
                assert conversation is not None
                resolved = await resolve_history(
                    db, conversation, before_message_id=started.user_message.message_id
                )
                history = resolved.messages
            attachments = await _attachment_refs(db, started.attachment_ids)
        return TurnRequest(
            conversation_id=started.conversation_id,
            owner_id=started.owner_id,
            turn_id=started.turn_id,
            assistant_message_id=started.assistant_message.message_id,
            user=UserInput(
                message_id=started.user_message.message_id,
                content=started.user_message.content,
                attachments=attachments,
            ),
            history=history,
            backend=(
                self._remote_access.access(started.conversation_id, started.owner_id)
                if self._remote_access is not None
                else None
            ),
            model=model,
            system_prompt=self._defaults.system_prompt,
        )

    # -- liveness and recovery -----------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                async with self._sessions() as db, db.begin():
                    await db.execute(
                        update(Turn)
                        .where(Turn.runner_id == self.runner_id, Turn.status == TurnStatus.RUNNING)
                        .values(heartbeat_at=utcnow())
                    )
                if self._shared:
                    await self.recover_orphans(stale_only=True)
                await self._prune_if_due()
            except Exception:
                log.exception("turn maintenance failed")

    async def _prune_if_due(self) -> None:
        now = asyncio.get_running_loop().time()
        if self._event_retention is None or now < self._next_prune:
            return
        self._next_prune = now + PRUNE_EVERY_SECONDS
        async with self._sessions() as db, db.begin():
            pruned = await streams.prune_finished(db, utcnow() - self._event_retention)
        if pruned:
            log.info("pruned the event logs of %d finished turns", pruned)

    async def recover_orphans(self, *, stale_only: bool) -> int:
        """Turns left running by a crashed process become `interrupted`, partial output kept."""
        stale_before = utcnow() - STALE_AFTER if stale_only else None
        recovered: list[StoredEvent] = []
        async with self._sessions() as db, db.begin():
            for turn in await turns.orphaned_turns(db, self.runner_id, stale_before):
                seq, data = await turns.interrupt(db, turn)
                recovered.append(StoredEvent(turn.id, seq, "turn.failed", data))
                log.warning("turn %s was left running by a stopped process: marked interrupted", turn.id)
        if recovered:
            await self._broker.publish(recovered)
        return len(recovered)


async def _attachment_refs(db: AsyncSession, attachment_ids: Sequence[int]) -> list[AttachmentRef]:
    """The message's attachments in the order the message lists them (upload order). One deleted
    between the send and this moment is left out; later turns see its tombstone in history."""
    if not attachment_ids:
        return []
    rows = await db.scalars(
        select(Attachment)
        .where(Attachment.id.in_(attachment_ids), Attachment.deleted_at.is_(None))
        .order_by(Attachment.id)
    )
    return [attachments.attachment_ref(row) for row in rows]


class _Relay:
    """Turns runtime events into logged, user-facing events and the persistence they imply."""

    def __init__(self, started: turns.StartedTurn, turn_log: TurnLog, model: str) -> None:
        self.started = started
        self.turn_log = turn_log
        self.model = model
        self.partial = ""
        self.finished = False
        self.latest_metrics: dict[str, Any] | None = None

    def forward(self, event: TurnEvent) -> None:
        if self.finished:
            return
        started = self.started
        match event:
            case TurnStarted():
                self.turn_log.append(
                    "turn.started",
                    {
                        "turn_id": started.turn_id,
                        "conversation_id": started.conversation_id,
                        "user_message_id": started.user_message.message_id,
                        "message_id": started.assistant_message.message_id,
                        "model": event.model,
                        "profile": event.profile,
                    },
                )
            case MessageDelta():
                self.partial += event.text
                self.turn_log.append("message.delta", {"text": event.text})
            case ToolStarted() | ToolCompleted():
                self.turn_log.append(event.type, event.model_dump(mode="json", exclude={"type"}))
            case ContextMetricsEvent():
                self.latest_metrics = event.snapshot.model_dump(mode="json")
                self.turn_log.append("context.metrics", self.latest_metrics)
            case ContextCompactionEvent():
                self._compaction(event)
            case TurnCompleted():
                self._finish("turn.completed", event.result, None, {})
            case TurnFailed():
                error = {"code": event.code, "message": event.message}
                self._finish("turn.failed", event.result, error, {**error, "partial": event.partial})
            case TurnCancelled():
                self._finish("turn.cancelled", event.result, None, {"partial": event.partial})

    def _compaction(self, event: ContextCompactionEvent) -> None:
        started, record, chain = self.started, event.record, event.checkpoint_chain
        model = self.model

        async def persist(db: AsyncSession, _: Sequence[StoredEvent]) -> None:
            if record.status == "completed" and chain:
                await turns.store_checkpoint(db, started.assistant_message.id, chain)
            await turns.record_compaction(db, started, record, model)

        self.turn_log.append("context.compaction", record.model_dump(mode="json", exclude_none=True), persist)

    def _finish(
        self, terminal: str, result: TurnResult, error: dict[str, str] | None, data: dict[str, Any]
    ) -> None:
        self.finished = True
        started = self.started
        now = utcnow()
        if terminal == "turn.completed":
            # The event carries the message exactly as it is stored in the same transaction.
            stored = turns.message_payload(started.assistant_message)
            stored.update(
                status="completed",
                result=user_visible_result(turns.result_document(result, error)),
                updated_at=now.isoformat(),
            )
            data = {"message": stored}

        # Compaction rows were written as their events arrived; the result only repeats them.
        async def persist(db: AsyncSession, events: Sequence[StoredEvent]) -> None:
            await turns.finish_turn(db, started, terminal, result, error, now, events[-1].seq)

        self.turn_log.append(terminal, data, persist)

    def fail(self, code: str, message: str) -> None:
        result = TurnResult(value=self.partial, termination_reason="provider_error")
        self._finish(
            "turn.failed",
            result,
            {"code": code, "message": message},
            {"code": code, "message": message, "partial": self.partial},
        )
