"""Setup as an operator meets it: migrations, the console script, startup checks, limits, health."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from alembic import command
from sqlalchemy import select

from backend.app import create_app
from backend.db import SchemaNotReady, alembic_config, create_engine, session_factory
from backend.models import User
from backend.settings import Settings
from tests.support.api import PASSWORD
from tests.support.cli import run_cli
from tests.support.servers import serve


async def test_cli_migrates_and_creates_an_operator(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
    env = {"CHAT_SHELL_DATABASE_URL": url, "CHAT_SHELL_DATA_DIR": str(tmp_path)}
    before = run_cli("create-user", "root", "--operator", env=env, stdin=PASSWORD + "\n")
    assert before.returncode != 0 and "chat-shell migrate" in before.stderr + before.stdout

    assert run_cli("migrate", env=env).returncode == 0
    assert run_cli("migrate", env=env).returncode == 0  # idempotent
    made = run_cli("create-user", "root", "--operator", env=env, stdin=PASSWORD + "\n")
    assert made.returncode == 0, made.stderr
    assert "created operator root" in made.stdout
    weak = run_cli("create-user", "other", env=env, stdin="short\n")
    assert weak.returncode != 0 and "at least" in weak.stderr

    engine = create_engine(url)
    async with session_factory(engine)() as db:
        users = list(await db.scalars(select(User)))
    await engine.dispose()
    assert [(u.username, u.is_operator) for u in users] == [("root", True)]


async def test_app_refuses_an_unmigrated_database(
    tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    app = create_app(make_settings(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"))
    with pytest.raises(SchemaNotReady, match="chat-shell migrate"):
        async with app.router.lifespan_context(app):
            pass


def test_migrations_round_trip(database_url: str) -> None:
    """Every migration downgrades and upgrades cleanly, and the models match the schema."""
    config = alembic_config(database_url)
    command.downgrade(config, "base")
    command.upgrade(config, "head")
    command.check(config)


async def test_oversized_bodies_are_refused(
    database_url: str, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(database_url, max_request_bytes=2048)
    async with serve(create_app(settings)) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        big = {"username": "x" * 4096, "password": PASSWORD}
        response = await client.post("/api/auth/register", json=big)
        assert response.status_code == 413 and response.json()["code"] == "request_too_large"

        async def chunks():  # no Content-Length: the limit applies while streaming
            for _ in range(8):
                yield b"x" * 1024

        streamed = await client.post(
            "/api/auth/register", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413


async def test_health_and_readiness(anonymous: httpx.AsyncClient) -> None:
    assert (await anonymous.get("/healthz")).json() == {"status": "ok"}
    assert (await anonymous.get("/readyz")).json() == {"status": "ready"}
    schema = (await anonymous.get("/openapi.json")).json()
    assert "/api/conversations/{conversation_id}/fork" in schema["paths"]
