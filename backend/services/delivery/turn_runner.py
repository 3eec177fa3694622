"""Background turn jobs: send (and regenerate) a message, run chat_shell, stop or decide.

A turn runs as a task of this process, independent of any HTTP connection: closing the page
never stops it; only an explicit stop does. The runtime's events go through the turn's relay
(`relay`) onto its durable log (`event_log`), which publishes them to listeners (`broker`).
The runner's heartbeat and the recovery of orphaned turns are its `liveness`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.db import transaction
from backend.model_catalog import ModelCatalog
from backend.models import Attachment, Conversation, Turn, TurnStatus, User
from backend.services.compaction.ahead import AheadCompactions
from backend.services.dashboard import rollups
from backend.services.delivery import turn_endings, turns
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.capabilities import CapabilityIssuer
from backend.services.delivery.event_log import EventWriter, LogWriteFailed
from backend.services.delivery.liveness import Liveness
from backend.services.delivery.relay import Relay
from backend.services.delivery.stream_events import relayed
from backend.services.errors import Conflict, Invalid, Unavailable
from backend.services.records import attachments, conversations
from backend.services.records.history import resolve_history
from backend.services.records.titles import GeneratedTitles
from chat_shell.contracts import AttachmentRef, NextTurnPreviewer, TurnRequest, TurnRuntime, UserInput

log = logging.getLogger(__name__)

# A turn whose log broke is ended (failed, partial text kept) with this many attempts, the
# wait between them doubling up to the cap; after that, recovery ends it.
END_ATTEMPTS = 8
END_FIRST_BACKOFF_SECONDS = 0.2
END_MAX_BACKOFF_SECONDS = 5.0


@dataclass
class _Job:
    started: turns.StartedTurn
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # Set once the turn's log broke: the job is stopping and its heartbeat stops with it.
    log_failed: bool = False

    def fail_log(self) -> None:
        self.log_failed = True
        self.cancel.set()


@dataclass(frozen=True)
class TurnDefaults:
    # The models a conversation may run with, and the one it runs with unless it chose one.
    catalog: ModelCatalog
    system_prompt: str | None
    # Before a message to a model is stored: raises when that model cannot take one now.
    admit: Callable[[str], None] = lambda model: None


@dataclass(frozen=True)
class TurnLimits:
    """Per user: turns running at once (across conversations); per turn: wall-clock seconds,
    after which it is stopped and ends `failed` (`turn_time_limit`) with what it wrote."""

    running_per_user: int | None = None
    wall_seconds: float | None = None


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
        limits: TurnLimits | None = None,
        ahead: AheadCompactions | None = None,
        previewer: NextTurnPreviewer | None = None,
        titles: GeneratedTitles | None = None,
    ) -> None:
        self.runner_id = uuid.uuid4().hex
        self._limits = limits or TurnLimits()
        self._sessions = sessions
        self.runtime = runtime
        self._writer = writer
        self._broker = broker
        self._defaults = defaults
        # Service mode: chat_shell loads the history itself, with access minted per turn.
        self._remote_access = remote_access
        self._jobs: dict[int, _Job] = {}
        self.liveness = Liveness(
            sessions,
            broker,
            self.runner_id,
            self._jobs,
            self._cancel_local,
            shared=shared,
            event_retention=event_retention,
        )
        # Compaction ahead of time: scheduled at turn end, awaited by the next turn that starts.
        self._ahead = ahead
        # Shows the next turn's request before the send (None: chat_shell runs as its own service).
        self.previewer = previewer
        # Names a conversation after its first reply (None: generated titles are off).
        self.titles = titles

    async def start(self) -> None:
        await self._broker.start(self._cancel_local, self._decide_local)
        await self.liveness.start()

    async def stop(self) -> None:
        """On shutdown running turns are stopped and finalized as cancelled, nothing is left running."""
        await self.liveness.stop()
        for job in list(self._jobs.values()):
            job.cancel.set()
        await asyncio.gather(*(job.done.wait() for job in list(self._jobs.values())))
        if self._ahead is not None:
            await self._ahead.stop()
        if self.titles is not None:
            await self.titles.stop()

    @property
    def active(self) -> int:
        return len(self._jobs)

    @property
    def catalog(self) -> ModelCatalog:
        return self._defaults.catalog

    @property
    def ahead(self) -> AheadCompactions | None:
        """Compaction ahead of time (None: off, or chat_shell runs as its own service)."""
        return self._ahead

    def model_for(self, conversation: Conversation) -> str:
        """The model of the conversation's next turn (`unknown_model` when it is not configured)."""
        return self._defaults.catalog.resolve(conversation.model_profile)

    @property
    def system_prompt(self) -> str | None:
        return self._defaults.system_prompt

    async def send(
        self,
        user: User,
        conversation_id: int,
        content: str,
        attachment_ids: Sequence[int],
        *,
        edits: int | None = None,
    ) -> turns.StartedTurn:
        """Stores the messages in their own committed transaction, then starts the turn. With
        `edits` (a question's `message_id`) the question is a new version of that one, with its
        files, and the reply follows it."""
        turns.require_content(content, attachment_ids)
        if edits is not None and attachment_ids:
            raise Invalid("edit_keeps_files", "an edited message keeps the files of the one it edits")
        async with transaction(self._sessions) as db:
            conversation = await conversations.get_owned(db, user, conversation_id)
            model = self.model_for(conversation)
            self._defaults.admit(model)
            edited = (
                await conversations.question_to_edit(db, conversation, edits) if edits is not None else None
            )
            started = await turns.start_turn(
                db,
                user,
                conversation,
                content,
                attachment_ids,
                self.runner_id,
                model,
                self._limits.running_per_user,
                edits=edited,
            )
        self._launch(started, model)
        return started

    async def regenerate(self, user: User, conversation_id: int, message_id: int | None) -> turns.StartedTurn:
        """A new version of reply `message_id` (default: the current path's last reply), in
        place: the question and its files stay, the earlier replies stay as versions."""
        async with transaction(self._sessions) as db:
            conversation = await conversations.get_owned(db, user, conversation_id)
            model = self.model_for(conversation)
            self._defaults.admit(model)
            question = await conversations.question_to_answer(db, conversation, message_id)
            started = await turns.start_version(
                db, user, conversation, question, self.runner_id, model, self._limits.running_per_user
            )
        self._launch(started, model)
        return started

    def _launch(self, started: turns.StartedTurn, model: str) -> None:
        job = _Job(started)
        self._jobs[started.turn_id] = job
        job.task = asyncio.create_task(self._run(job, model), name=f"turn-{started.turn_id}")

    async def wait(self, turn_id: int) -> None:
        job = self._jobs.get(turn_id)
        if job is not None:
            await job.done.wait()

    async def request_stop(self, turn_id: int) -> None:
        """Stores the stop, then tells the runner through the broker. Acknowledged once stored
        or told; with neither the database nor the broker reachable it is refused."""
        try:
            async with transaction(self._sessions) as db:
                await turns.store_stop(db, turn_id)
            stored = True
        except (SQLAlchemyError, OSError):
            log.warning("the stop of turn %s could not be stored", turn_id, exc_info=True)
            stored = False
        told = await self._broker.request_cancel(turn_id)
        if not (stored or told):
            raise Unavailable(
                "stop_not_delivered", "the stop could not be stored or delivered; nothing changed, try again"
            )

    async def decide(self, turn_id: int | None, call_id: str, allow: bool) -> int:
        """The user's decision on an "ask first" call the turn waits on (its id returned). It
        goes through the broker to the replica running the turn, which alone knows whether the
        call still waits."""
        if turn_id is None:
            raise _nothing_to_decide()
        decided = await self._broker.request_decision(turn_id, call_id, allow)
        if decided is None:
            raise Unavailable(
                "approval_not_delivered",
                "the decision could not reach the server running this reply; nothing changed, try again",
            )
        if not decided:
            raise _nothing_to_decide()
        return turn_id

    async def _decide_local(self, turn_id: int, call_id: str, allow: bool) -> bool | None:
        """Whether the call waited and is now decided; None when this process does not run the turn."""
        job = self._jobs.get(turn_id)
        if job is None:
            return None
        if job.cancel.is_set():
            return False
        return await self.runtime.decide(turn_id, call_id, allow)

    async def _cancel_local(self, turn_id: int) -> bool:
        job = self._jobs.get(turn_id)
        if job is None:
            return False
        job.cancel.set()
        return True

    # -- the job -------------------------------------------------------------------------

    async def _run(self, job: _Job, model: str) -> None:
        started = job.started
        turn_log = self._writer.open(started.turn_id, on_error=job.fail_log)
        relay = Relay(started, turn_log, model)
        deadline = asyncio.timeout(self._limits.wall_seconds)
        try:
            async with deadline:
                if self._ahead is not None:
                    # A compaction ahead of time still running: wait for its checkpoint, its
                    # statuses on this turn's stream (stored with the turn it follows).
                    await self._ahead.wait(
                        started.conversation_id, lambda event: turn_log.append(relayed(event)), job.cancel
                    )
                request = await self._build_request(started, model)
                async for event in self.runtime.run(request, job.cancel):
                    relay.forward(event)
            if not relay.finished:
                relay.fail("runtime_error", "the runtime ended without a result")
        except LogWriteFailed:
            pass  # ended below, from what its log holds
        except Exception as exc:
            if not relay.finished and isinstance(exc, TimeoutError) and deadline.expired():
                log.warning("turn %s reached its time limit and was stopped", started.turn_id)
                limit = f"{self._limits.wall_seconds:g}"
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
            if self._ahead is not None and relay.finished:
                self._ahead.schedule(started, model)
            if self.titles is not None and relay.finished:
                self.titles.schedule(started, model)
            job.done.set()

    async def _end_unstored(self, turn_id: int) -> None:
        """Ends a turn whose log broke as `failed` with the text its log holds, as soon as the
        database takes writes again (bounded retries; after them, recovery ends it)."""
        backoff = END_FIRST_BACKOFF_SECONDS
        for attempt in range(1, END_ATTEMPTS + 1):
            try:
                async with self._sessions() as db, db.begin():
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
            await self._broker.publish([ending])
            return
        log.error("turn %s: its failure could not be stored; recovery will end it", turn_id)

    async def _build_request(self, started: turns.StartedTurn, model: str) -> TurnRequest:
        """Package mode resolves the history here; service mode sends `backend` access instead
        and chat_shell loads the same pipeline's output over HTTP."""
        history = None
        async with self._sessions() as db:
            conversation = await db.get(Conversation, started.conversation_id)
            assert conversation is not None
            mcp_servers, instructions = conversation.mcp_servers, conversation.instructions
            ask_first = conversation.mcp_ask_first or []
            if self._remote_access is None:
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
                self._remote_access.access(started.turn_id, started.conversation_id, started.owner_id)
                if self._remote_access is not None
                else None
            ),
            model=model,
            system_prompt=self._defaults.system_prompt,
            mcp_servers=mcp_servers,
            instructions=instructions,
            ask_first=ask_first,
        )


def _nothing_to_decide() -> Conflict:
    return Conflict("no_pending_approval", "no tool call of this conversation waits for your decision")


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
