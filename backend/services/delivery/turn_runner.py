"""Accepting turns: send (and regenerate) a message, stop it, decide an "ask first" call.

A send stores its messages and the turn in one committed transaction, then hands the turn to
where turns run: this process's `TurnHost` (the embedded server, SQLite) or the job queue
(`job_queue`, PostgreSQL), whose workers run it. Stops and decisions follow the turn there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.db import transaction
from backend.models import Conversation, User
from backend.services.conversations import conversations
from backend.services.delivery import streams, turns
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.job_queue import TurnQueue
from backend.services.delivery.turn_host import TurnHost
from backend.services.errors import Conflict, Invalid, Unavailable
from backend.services.model_catalog import ModelCatalog
from chat_shell.contracts import TERMINAL_EVENT_TYPES, NextTurnPreviewer, TurnRuntime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnDefaults:
    # The models a conversation may run with, and the one it runs with unless it chose one.
    catalog: ModelCatalog
    system_prompt: str | None
    # Before a message to a model is stored: raises when that model cannot take one now.
    admit: Callable[[str], None] = lambda model: None


@dataclass(frozen=True)
class TurnLimits:
    """Per user: turns running at once (across conversations). In the whole service: turns
    running at once (admission: past it a send gets 503), None for no limit."""

    running_per_user: int | None = None
    capacity: int | None = None


@dataclass(eq=False)
class TurnRunner:
    sessions: async_sessionmaker[AsyncSession]
    # The runtime this process knows (MCP panels, previews); a queued turn runs in a worker's.
    runtime: TurnRuntime
    broker: LocalBroker
    defaults: TurnDefaults
    _: KW_ONLY
    host: TurnHost | None = None
    queue: TurnQueue | None = None
    limits: TurnLimits = field(default_factory=TurnLimits)
    # Shows the next turn's request before the send (None: chat_shell runs as its own service).
    previewer: NextTurnPreviewer | None = None
    stream_poll_seconds: float = 1.0

    def __post_init__(self) -> None:
        assert (self.host is None) != (self.queue is None), "turns run in this process or on the queue"

    @property
    def active(self) -> int:
        """Turns running in this process."""
        return self.host.active if self.host is not None else 0

    @property
    def catalog(self) -> ModelCatalog:
        return self.defaults.catalog

    def model_for(self, conversation: Conversation) -> str:
        """The model of the conversation's next turn (`unknown_model` when it is not configured)."""
        return self.defaults.catalog.resolve(conversation.model_profile)

    @property
    def system_prompt(self) -> str | None:
        return self.defaults.system_prompt

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
        await self._require_worker()
        async with transaction(self.sessions) as db:
            conversation, model = await self._admit(db, user, conversation_id)
            edited = (
                await conversations.question_to_edit(db, conversation, edits) if edits is not None else None
            )
            started = await turns.start_turn(
                db,
                user,
                conversation,
                content,
                attachment_ids,
                model,
                self.limits.running_per_user,
                edits=edited,
            )
        await self._launch(started, model)
        return started

    async def regenerate(self, user: User, conversation_id: int, message_id: int | None) -> turns.StartedTurn:
        """A new version of reply `message_id` (default: the current path's last reply), in
        place: the question and its files stay, the earlier replies stay as versions."""
        await self._require_worker()
        async with transaction(self.sessions) as db:
            conversation, model = await self._admit(db, user, conversation_id)
            question = await conversations.question_to_answer(db, conversation, message_id)
            started = await turns.start_version(
                db, user, conversation, question, model, self.limits.running_per_user
            )
        await self._launch(started, model)
        return started

    async def _admit(self, db: AsyncSession, user: User, conversation_id: int) -> tuple[Conversation, str]:
        """Before a turn is stored: the user's conversation and the model its turn runs with,
        which must take a message now, with room for one more running turn."""
        conversation = await conversations.get_owned(db, user, conversation_id)
        model = self.model_for(conversation)
        self.defaults.admit(model)
        await turns.require_capacity(db, self.limits.capacity)
        return conversation, model

    async def _require_worker(self) -> None:
        if self.queue is not None:
            await self.queue.require_worker()

    async def _launch(self, started: turns.StartedTurn, model: str) -> None:
        if self.queue is not None:
            await self.queue.defer_turn(started, model)
        else:
            assert self.host is not None
            self.host.launch(started, model)

    async def wait(self, turn_id: int) -> None:
        """Until the turn has ended: its job here, or its log's terminal event."""
        if self.host is not None:
            await self.host.wait(turn_id)
            return
        async for event in streams.follow(self.sessions, self.broker, turn_id, 0, self.stream_poll_seconds):
            if event.event in TERMINAL_EVENT_TYPES:
                return

    async def request_stop(self, turn_id: int) -> None:
        """Stores the stop, then tells where the turn runs: the broker's fast path to the
        process running it, and the queue's abort. Acknowledged once any of them took it;
        with none of them reachable it is refused."""
        try:
            async with transaction(self.sessions) as db:
                await turns.store_stop(db, turn_id)
            stored = True
        except (SQLAlchemyError, OSError):
            log.warning("the stop of turn %s could not be stored", turn_id, exc_info=True)
            stored = False
        told = await self.broker.request_cancel(turn_id)
        aborted = False
        if self.queue is not None:
            try:
                aborted = await self.queue.abort_turn(turn_id)
            except Exception:
                log.warning("the queue could not take the stop of turn %s", turn_id, exc_info=True)
        if not (stored or told or aborted):
            raise Unavailable(
                "stop_not_delivered", "the stop could not be stored or delivered; nothing changed, try again"
            )

    async def decide(self, turn_id: int | None, call_id: str, allow: bool) -> int:
        """The user's decision on an "ask first" call the turn waits on (its id returned). It
        goes through the broker to the process running the turn, which alone knows whether the
        call still waits."""
        if turn_id is None:
            raise _nothing_to_decide()
        decided = await self.broker.request_decision(turn_id, call_id, allow)
        if decided is None:
            raise Unavailable(
                "approval_not_delivered",
                "the decision could not reach the server running this reply; nothing changed, try again",
            )
        if not decided:
            raise _nothing_to_decide()
        return turn_id


def _nothing_to_decide() -> Conflict:
    return Conflict("no_pending_approval", "no tool call of this conversation waits for your decision")
