"""Compaction ahead of time (issue 20): the turn after the trigger starts as fast as any other.

When a turn ends, its conversation is handed to `AheadCompactions.after_end`: in the background
the runtime runs the guard's own stages and compactor over the history the next turn would
start from, and when that request is estimated at or above the profile's pre-trigger
(`pre_trigger_tokens`, default 0.7 x trigger) it summarizes it exactly as a turn's hook would.
The checkpoint is stored on the finished turn's assistant message (SPEC 5.5), where
`from_latest_compaction` and both placements find it, and the attempt is recorded in
`compaction_events` as strategy `summary_ahead`, so dashboards and Prometheus count it apart.

The policy:
- At most one job per conversation in a process; the compactor's per-conversation lock also
  keeps it apart from any compaction inside a turn.
- A send while the job runs does not cancel it and does not start a second summary: the turn
  waits for it (`wait`), relaying its `started`/`in_progress`/final statuses on the turn's own
  stream (the meter shows "compacting", heartbeats keep the stream alive), and then starts from
  the new checkpoint. Stopping that turn ends its wait (the turn ends cancelled at once), not
  the job. A turn that starts after the job ended still relays its completed record first, so
  the page draws the boundary as that turn's meter falls to the checkpoint.
- The job is cancelled only when the process shuts down (`stop`); then nothing is stored.
- A refused turn, a deleted conversation or a deleted or disabled owner gets no job; a conversation
  deleted while the job runs gets nothing stored (checked again in the storing transaction).
- The checkpoint, the record on the message and the `compaction_events` row are written in one
  transaction at the end: a process killed mid-job leaves nothing, and the next turn compacts
  inline as before. So does a failed summary (recorded as a `fallback` row).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.db import transaction
from backend.models import Message
from backend.services.accounts import auth
from backend.services.conversations import conversations
from backend.services.dashboard import rollups
from backend.services.delivery import turn_endings, turns
from backend.services.errors import NotFound
from backend.services.records.history import request_basis, turn_entries
from chat_shell.contracts import AheadCompactor, AheadRequest, CompactionStatusSink, ContextCompactionEvent

log = logging.getLogger(__name__)


@dataclass
class _Job:
    task: asyncio.Task[None] | None = None
    # Turns waiting for the job, and its latest status (replayed to a turn that starts waiting).
    listeners: list[CompactionStatusSink] = field(default_factory=list)
    status: ContextCompactionEvent | None = None


class AheadCompactions:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], runtime: AheadCompactor, system_prompt: str | None
    ) -> None:
        self._sessions = sessions
        self._runtime = runtime
        self._system_prompt = system_prompt
        self._jobs: dict[int, _Job] = {}
        self._closed = False

    async def before_end(self, started: turns.StartedTurn, model: str) -> None:
        """Nothing yet: the job reads the turn's outcome, stored at its end."""

    def after_end(self, started: turns.StartedTurn, model: str) -> None:
        """After a turn has ended and its outcome is stored: compact its conversation ahead of
        time if the next request would reach the pre-trigger (decided by the job)."""
        if self._closed or started.conversation_id in self._jobs:
            return
        job = self._jobs[started.conversation_id] = _Job()
        job.task = asyncio.create_task(
            self._run(job, started, model), name=f"compaction-ahead-{started.conversation_id}"
        )

    def running(self, conversation_id: int) -> bool:
        return conversation_id in self._jobs

    async def wait(
        self, conversation_id: int, on_status: CompactionStatusSink, stop: asyncio.Event | None = None
    ) -> None:
        """Until the conversation's job (if one runs) has ended, or `stop` is set, its statuses
        to `on_status`. The job runs on whatever the waiter does."""
        job = self._jobs.get(conversation_id)
        if job is None or job.task is None:
            return
        if job.status is not None:
            on_status(job.status)
        job.listeners.append(on_status)
        waited: list[asyncio.Future[Any]] = [job.task]
        if stop is not None:
            waited.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        finally:
            job.listeners.remove(on_status)
            for future in waited[1:]:
                future.cancel()

    async def stop(self) -> None:
        """At shutdown: running jobs are cancelled and store nothing."""
        self._closed = True
        tasks = [job.task for job in self._jobs.values() if job.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- the job -------------------------------------------------------------------------

    async def _run(self, job: _Job, started: turns.StartedTurn, model: str) -> None:
        try:
            await self.compact(started, model, lambda event: self._status(job, event))
        finally:
            self._jobs.pop(started.conversation_id, None)

    async def compact(
        self, started: turns.StartedTurn, model: str, on_status: CompactionStatusSink | None = None
    ) -> None:
        """The job itself: this process's task, or a job of the queue (whose lock keeps it
        apart from the conversation's turns)."""
        try:
            request = await self._request(started, model)
            if request is None:
                return
            outcome = await self._runtime.compact_ahead(request, on_status or (lambda event: None))
            if outcome is not None:
                await self._store(started, model, outcome)
        except Exception:
            log.exception("conversation %s: the compaction ahead of time failed", started.conversation_id)

    def _status(self, job: _Job, event: ContextCompactionEvent) -> None:
        shown = event.model_copy(update={"checkpoint_chain": None})
        job.status = shown
        for listener in list(job.listeners):
            listener(shown)

    async def _request(self, started: turns.StartedTurn, model: str) -> AheadRequest | None:
        """What the job compacts: the history the next turn would start from, or None when no
        job is due (refused turn, deleted conversation, gone message)."""
        async with self._sessions() as db:
            if not await auth.is_enabled(db, started.owner_id):
                return None  # a disabled account's conversations cost no model calls
            try:
                conversation = await conversations.get_for_owner(
                    db, started.owner_id, started.conversation_id
                )
            except NotFound:
                return None
            message = await db.get(Message, started.assistant_message.id)
            if message is None or (message.result or {}).get("termination_reason") == "context_refused":
                return None
            # The path of the turn's reply, whichever version is shown by now.
            basis = await request_basis(
                db, conversation, model=model, system_prompt=self._system_prompt, through_pk=message.id
            )
            own_ids = [entry.id for entry in turn_entries(message) if entry.id]
        return AheadRequest(
            **basis, turn_id=started.turn_id, assistant_message_id=message.message_id, own_ids=own_ids
        )

    async def _store(self, started: turns.StartedTurn, model: str, outcome: ContextCompactionEvent) -> None:
        """The checkpoint and its records, in one transaction; nothing for a deleted conversation."""
        async with transaction(self._sessions) as db:
            try:
                await conversations.get_for_owner(db, started.owner_id, started.conversation_id)
            except NotFound:
                return
            if outcome.record.status == "completed" and outcome.checkpoint_chain:
                await turn_endings.store_checkpoint(
                    db, started.assistant_message.id, outcome.checkpoint_chain
                )
                await turn_endings.add_compaction_record(db, started.assistant_message.id, outcome.record)
            await turn_endings.record_compaction(db, started, outcome.record, model)
            await rollups.write_staged(db)
