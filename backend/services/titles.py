"""Generated titles (issue 22): a conversation the page created names itself after its first reply.

The page creates a conversation with its first line as the title and `generate_title`, which
stores the title as a `fallback`. When a turn of such a conversation completes, `schedule` asks
the runtime in the background for a short title of that exchange (the summarizer's model; the
call is never streamed and never delays the turn's end). The title is stored only while the
source is still `fallback`, in one conditional update: a rename made meanwhile wins, and a
deleted conversation gets nothing. A call that fails or answers nothing leaves the fallback, and
the next completed reply tries again. The page re-reads the conversation after the reply.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.db import transaction
from backend.models import Conversation, Message, MessageStatus, TitleSource
from backend.services.delivery import turns
from chat_shell.contracts import TitleRequest, TurnRuntime

log = logging.getLogger(__name__)


class GeneratedTitles:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], runtime: TurnRuntime) -> None:
        self._sessions = sessions
        self._runtime = runtime
        self._jobs: dict[int, asyncio.Task[None]] = {}
        self._closed = False

    def schedule(self, started: turns.StartedTurn, model: str) -> None:
        """After a turn's outcome is stored: name its conversation if it still has its fallback
        title and the reply completed (decided by the job); one job per conversation."""
        if self._closed or not started.awaits_title or started.conversation_id in self._jobs:
            return
        self._jobs[started.conversation_id] = asyncio.create_task(
            self._run(started, model), name=f"title-{started.conversation_id}"
        )

    async def settled(self) -> None:
        """Until every job started so far has ended (tests and shutdown)."""
        await asyncio.gather(*self._jobs.values(), return_exceptions=True)

    async def stop(self) -> None:
        """At shutdown: running jobs are cancelled and store nothing."""
        self._closed = True
        for task in self._jobs.values():
            task.cancel()
        await self.settled()

    async def _run(self, started: turns.StartedTurn, model: str) -> None:
        try:
            request = await self._request(started, model)
            if request is None:
                return
            title = await self._runtime.write_title(request)
            if title is not None:
                await self._store(started.conversation_id, title)
        except Exception:
            log.exception("conversation %s: the title could not be written", started.conversation_id)
        finally:
            self._jobs.pop(started.conversation_id, None)

    async def _request(self, started: turns.StartedTurn, model: str) -> TitleRequest | None:
        async with self._sessions() as db:
            conversation = await db.get(Conversation, started.conversation_id)
            if (
                conversation is None
                or conversation.deleted_at is not None
                or conversation.title_source != TitleSource.FALLBACK
            ):
                return None
            reply = await db.get(Message, started.assistant_message.id)
            if reply is None or reply.status != MessageStatus.COMPLETED:
                return None
            reply_text = (reply.result or {}).get("value") or ""
            if not reply_text.strip():
                return None  # a reply of tool calls only says nothing to name it by
            return TitleRequest(
                conversation_id=conversation.id,
                model=model,
                user_text=started.user_message.content,
                file_names=[attachment.filename for attachment in started.attachments],
                reply_text=reply_text,
            )

    async def _store(self, conversation_id: int, title: str) -> None:
        # Conditional: a rename (or a deletion) that landed during the call wins.
        async with transaction(self._sessions) as db:
            await db.execute(
                update(Conversation)
                .where(
                    Conversation.id == conversation_id,
                    Conversation.title_source == TitleSource.FALLBACK,
                    Conversation.deleted_at.is_(None),
                )
                .values(title=title, title_source=TitleSource.GENERATED)
            )
