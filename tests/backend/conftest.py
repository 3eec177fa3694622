"""Fixtures for backend tests: the app pointed at the scripted provider, and empty databases
for migration tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from backend.app import create_app
from backend.settings import Settings
from tests.support import databases
from tests.support.api import signed_in
from tests.support.scripted_provider import ScriptedProvider
from tests.support.servers import serve


@pytest.fixture
def chat_settings(
    make_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> Callable[..., Settings]:
    """Settings of a backend whose model is the scripted provider (`make_settings` otherwise)."""

    def factory(database_url: str, **overrides: object) -> Settings:
        return make_settings(database_url, openai_base_url=scripted_provider.base_url, **overrides)

    return factory


@pytest.fixture
async def chat_server(database_url: str, chat_settings: Callable[..., Settings]) -> AsyncIterator[str]:
    """The backend with chat_shell in package mode, talking to the scripted provider."""
    settings = chat_settings(database_url, sse_ping_seconds=0.5)
    async with serve(create_app(settings)) as base_url:
        yield base_url


@pytest.fixture
async def chatter(chat_server: str) -> AsyncIterator[httpx.AsyncClient]:
    async with signed_in(chat_server, "chatter") as client:
        yield client


@pytest.fixture(params=["sqlite", "postgres"])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database on each engine, for migration tests that stop at an older revision."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
        return
    if not asyncio.run(databases.postgres_available()):
        pytest.skip("PostgreSQL is not reachable")
    url = asyncio.run(databases.create_postgres_database())
    yield url
    asyncio.run(databases.drop_postgres_database(url))
