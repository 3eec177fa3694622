"""Running turn jobs in this process: the embedded server's own, or a worker's from the queue.

A turn runs independent of any HTTP connection: closing the page never stops it; only an
explicit stop does. The runtime's events go through the turn's relay (`relay`) onto its
durable log (`event_log`), which publishes them to listeners (`broker`). A turn that runs
again (its worker died, or a draining worker handed it back) starts over from the conversation
as it was before the turn: its log first says `turn.restarted`, and what the earlier attempt
wrote is replaced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import KeysView, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Attachment, CompactionEvent, Conversation, Message, Turn, TurnStatus
from backend.services.attachments import attachments
from backend.services.dashboard import rollups
from backend.services.delivery import turn_endings, turns
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.capabilities import CapabilityIssuer
from backend.services.delivery.event_log import EventWriter, LogWriteFailed, TurnLog, latest_seq
from backend.services.delivery.relay import Relay
from backend.services.delivery.stream_events import Restarted, relayed
from backend.services.records.history import request_basis
from backend.services.titles import GeneratedTitles
from chat_shell.contracts import (
    TERMINAL_EVENT_TYPES,
    AttachmentRef,
    CompactionRecord,
    CompactionStatusSink,
    ContextCompactionEvent,
    TurnRequest,
    TurnRuntime,
    UserInput,
)

log = logging.getLogger(__name__)

# A turn whose log broke is ended (failed, partial text kept) with this many attempts, the
# wait between them doubling up to the cap; after that, recovery ends it.
END_ATTEMPTS = 8
END_FIRST_BACKOFF_SECONDS = 0.2
END_MAX_BACKOFF_SECONDS = 5.0


class AheadScheduler(Protocol):
    """Compaction ahead of time, as a turn sees it: scheduled at its end, awaited at its start.

    A queue defers the job `before_end`, while the turn's job still holds the conversation's
    lock: a send that follows the ending it sees then queues behind the compaction. A scheduler
    in this process starts it `after_end`, once the outcome it reads is stored."""

    async def before_end(self, started: turns.StartedTurn, model: str) -> None: ...

    def after_end(self, started: turns.StartedTurn, model: str) -> None: ...

    async def wait(
        self, conversation_id: int, on_status: CompactionStatusSink, stop: asyncio.Event | None = None
    ) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class _Job:
    started: turns.StartedTurn
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def fail_log(self) -> None:
        self.cancel.set()


@dataclass(frozen=True)
class HostOptions:
    system_prompt: str | None = None
    # One turn's wall-clock seconds, after which it is stopped and ends `failed` (`turn_time_limit`).
    wall_seconds: float | None = None
    # Service mode: chat_shell loads the history itself, with access minted per turn.
    remote_access: CapabilityIssuer | None = None


@dataclass(eq=False)
class TurnHost:
    sessions: async_sessionmaker[AsyncSession]
    runtime: TurnRuntime
    writer: EventWriter
    broker: LocalBroker
    options: HostOptions
    _: KW_ONLY
    # Compaction ahead of time: scheduled at turn end, awaited by the next turn that starts.
    ahead: AheadScheduler | None = None
    # Names a conversation after its first reply (None: generated titles are off).
    titles: GeneratedTitles | None = None
    _jobs: dict[int, _Job] = field(default_factory=dict, init=False)

    @property
    def active(self) -> int:
        return len(self._jobs)

    @property
    def running(self) -> KeysView[int]:
        """The turns this process runs now (a live view)."""
        return self._jobs.keys()

    def launch(self, started: turns.StartedTurn, model: str) -> None:
        """Starts the turn as a task of this process (the embedded server)."""
        job = self._job(started)
        job.task = asyncio.create_task(self._run(job, model, restarted=False), name=f"turn-{started.turn_id}")

    async def run(self, turn_id: int, model: str, stop: asyncio.Event) -> None:
        """Runs a turn of the queue to its end (a worker's job); a turn no longer running is
        skipped. Setting `stop` stops it as the user's stop does."""
        async with self.sessions() as db:
            started = await turns.load_started(db, turn_id)
            restarted = started is not None and await latest_seq(db, turn_id) > 0
        if started is None:
            return
        job = self._job(started)
        job.cancel = stop
        if restarted:
            await self._forget_attempt(started)
        await self._run(job, model, restarted=restarted)

    def _job(self, started: turns.StartedTurn) -> _Job:
        job = self._jobs[started.turn_id] = _Job(started)
        return job

    async def wait(self, turn_id: int) -> None:
        job = self._jobs.get(turn_id)
        if job is not None:
            await job.done.wait()

    async def stop(self) -> None:
        """On shutdown running turns are stopped and finalized as cancelled, nothing is left running."""
        for job in list(self._jobs.values()):
            job.cancel.set()
        await asyncio.gather(*(job.done.wait() for job in list(self._jobs.values())))
        if self.ahead is not None:
            await self.ahead.stop()
        if self.titles is not None:
            await self.titles.stop()

    async def cancel_local(self, turn_id: int) -> bool:
        job = self._jobs.get(turn_id)
        if job is None:
            return False
        job.cancel.set()
        return True

    async def decide_local(self, turn_id: int, call_id: str, allow: bool) -> bool | None:
        """Whether the call waited and is now decided; None when this process does not run the turn."""
        job = self._jobs.get(turn_id)
        if job is None:
            return None
        if job.cancel.is_set():
            return False
        return await self.runtime.decide(turn_id, call_id, allow)

    # -- the job -------------------------------------------------------------------------

    async def _forget_attempt(self, started: turns.StartedTurn) -> None:
        """Before a turn runs again: the checkpoint and compaction rows of the attempt that
        died go, so the turn starts from the conversation as it was before it."""
        async with self.sessions() as db, db.begin():
            message = await db.get(Message, started.assistant_message.id)
            if message is not None:
                message.result = None
                message.has_checkpoint = False
            await db.execute(delete(CompactionEvent).where(CompactionEvent.turn_id == started.turn_id))

    async def _run(self, job: _Job, model: str, *, restarted: bool) -> None:
        started = job.started
        async with self.sessions() as db:
            last_seq = await latest_seq(db, started.turn_id)
        turn_log = self.writer.open(started.turn_id, last_seq, on_error=job.fail_log)
        relay = Relay(started, turn_log, model)
        deadline = asyncio.timeout(self.options.wall_seconds)
        try:
            if restarted:
                turn_log.append(Restarted())
            async with deadline:
                if self.ahead is not None:
                    await self._after_ahead(started, turn_log, job.cancel)
                request = await self._build_request(started, model)
                async for event in self.runtime.run(request, job.cancel):
                    if self.ahead is not None and event.type in TERMINAL_EVENT_TYPES:
                        await self.ahead.before_end(started, model)
                    relay.forward(event)
            if not relay.finished:
                relay.fail("runtime_error", "the runtime ended without a result")
        except LogWriteFailed:
            pass  # ended below, from what its log holds
        except Exception as exc:
            if not relay.finished and isinstance(exc, TimeoutError) and deadline.expired():
                log.warning("turn %s reached its time limit and was stopped", started.turn_id)
                limit = f"{self.options.wall_seconds:g}"
                relay.fail(
                    "turn_time_limit",
                    f"the reply was stopped at the time limit of {limit} s per turn",
                    "time_limit",
                )
            else:
                log.exception("turn %s failed outside the runtime", started.turn_id)
                if not relay.finished and not turn_log.broken:
                    relay.fail("internal_error", f"the turn could not run: {type(exc).__name__}")
        finally:
            try:
                await turn_log.drain()
            except LogWriteFailed:
                log.exception("turn %s: its events could not be stored", started.turn_id)
                await self._end_unstored(started.turn_id)
            self._jobs.pop(started.turn_id, None)
            # Before `done`: a send that follows this turn at once finds the job and waits.
            if self.ahead is not None and relay.finished:
                self.ahead.after_end(started, model)
            if self.titles is not None and relay.finished:
                self.titles.schedule(started, model)
            job.done.set()

    async def _after_ahead(self, started: turns.StartedTurn, turn_log: TurnLog, stop: asyncio.Event) -> None:
        """Before the turn runs: a compaction ahead of time still running is waited for, its
        statuses on this turn's stream (stored with the turn it follows). Then the stream
        carries each completed one the history opens with that it has not shown, even when the
        job ended before this turn: the page draws the boundary as the meter falls, not only
        after a reload."""
        assert self.ahead is not None
        shown: set[datetime] = set()

        def relay(event: ContextCompactionEvent) -> None:
            if event.record.status == "completed":
                shown.add(event.record.created_at)
            turn_log.append(relayed(event))

        await self.ahead.wait(started.conversation_id, relay, stop)
        for record in await self._made_ahead(started):
            if record.created_at not in shown:
                turn_log.append(relayed(ContextCompactionEvent(record=record)))

    async def _made_ahead(self, started: turns.StartedTurn) -> list[CompactionRecord]:
        """The completed compactions ahead of time stored on the reply the turn's question
        follows (made after that reply's turn ended)."""
        parent_pk = started.user_message.parent_pk
        if parent_pk is None:
            return []
        async with self.sessions() as db:
            reply = await db.get(Message, parent_pk)
            if reply is None or reply.conversation_id != started.conversation_id:
                return []
            records = (reply.result or {}).get("context_compactions", [])
        return [
            CompactionRecord.model_validate(record)
            for record in records
            if record.get("strategy") == "summary_ahead" and record.get("status") == "completed"
        ]

    async def _end_unstored(self, turn_id: int) -> None:
        """Ends a turn whose log broke as `failed` with the text its log holds, as soon as the
        database takes writes again (bounded retries; after them, recovery ends it)."""
        backoff = END_FIRST_BACKOFF_SECONDS
        for attempt in range(1, END_ATTEMPTS + 1):
            try:
                async with self.sessions() as db, db.begin():
                    turn = await db.get(Turn, turn_id)
                    if turn is None or turn.status != TurnStatus.RUNNING:
                        return
                    ending = await turn_endings.end_from_log(db, turn, turn_endings.LOG_FAILED)
                    await rollups.write_staged(db)
            except Exception:
                log.warning("turn %s: its failure could not be stored (attempt %d)", turn_id, attempt)
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, END_MAX_BACKOFF_SECONDS)
                continue
            await self.broker.publish([ending])
            return
        log.error("turn %s: its failure could not be stored; recovery will end it", turn_id)

    async def _build_request(self, started: turns.StartedTurn, model: str) -> TurnRequest:
        """Package mode resolves the history here; service mode sends `backend` access instead
        and chat_shell loads the same pipeline's output over HTTP."""
        remote = self.options.remote_access
        async with self.sessions() as db:
            conversation = await db.get(Conversation, started.conversation_id)
            assert conversation is not None
            basis = await request_basis(
                db,
                conversation,
                model=model,
                system_prompt=self.options.system_prompt,
                before_message_id=started.user_message.message_id,
                with_history=remote is None,
            )
            mcp_servers, ask_first = conversation.mcp_servers, conversation.mcp_ask_first or []
            refs = await _attachment_refs(db, started.attachment_ids)
        return TurnRequest(
            **basis,
            turn_id=started.turn_id,
            assistant_message_id=started.assistant_message.message_id,
            user=UserInput(
                message_id=started.user_message.message_id,
                content=started.user_message.content,
                attachments=refs,
            ),
            backend=(
                remote.access(started.turn_id, started.conversation_id, started.owner_id)
                if remote is not None
                else None
            ),
            mcp_servers=mcp_servers,
            ask_first=ask_first,
        )


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
