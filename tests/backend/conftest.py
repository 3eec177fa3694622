"""Fixtures for backend tests that run turns: the app pointed at the scripted provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from backend.app import create_app
from backend.settings import Settings
from tests.support.api import new_user
from tests.support.scripted_provider import ScriptedProvider
from tests.support.servers import serve


@pytest.fixture
async def chat_server(
    database_url: str, make_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> AsyncIterator[str]:
    """The backend with chat_shell in package mode, talking to the scripted provider."""
    settings = make_settings(database_url, openai_base_url=scripted_provider.base_url, sse_ping_seconds=0.5)
    async with serve(create_app(settings)) as base_url:
        yield base_url


@pytest.fixture
async def chatter(chat_server: str) -> AsyncIterator[httpx.AsyncClient]:
    client = await new_user(chat_server, "chatter")
    yield client
    await client.aclose()
